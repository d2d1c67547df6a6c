"""What a real small model writes as an agent ends as a row with a status and a reason code, never a crash.

``recorded/smollm2_agent.json`` holds completions SmolLM2-135M-Instruct (Q4_1
dequantized) wrote in ``trajkit demo --student smollm2`` (held-out tool tasks,
before SFT and after 4 SFT steps on the fixture's trajectories), as the text of
the sampled tokens: prose, code instead of a call, endless text, JSON outside any
tag, tag soup with a stray ``</tool_call>``, calls to tools that do not exist,
arguments that violate the schema, a block whose JSON does not parse, a call cut
off by the length limit. Each is
turned into a completion by the transformers backend's own decoding (SmolLM2's
tokenizer), then run through the agent loop against real MCP servers and judged
(``envs.solve.solve``: what rollouts, pass@k tagging and ``eval passk`` run), and
scored as ``eval tools`` scores a turn.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from trajkit import schema as S
from trajkit.envs.agent import AgentLimits
from trajkit.envs.env import ToolEnv
from trajkit.envs.solve import solve
from trajkit.eval.toolcall import Expected
from trajkit.eval.tools import read_calls, score_turn
from trajkit.models.base import Backend, Completion, ModelSpec, SamplingParams
from trajkit.models.chat import decode_completion, render_prompt

RECORDED = json.loads((Path(__file__).parent / "recorded" / "smollm2_agent.json").read_text())
# kind -> (trajectory status, reason_code): a call the model botched is its mistake (a failed episode, verdict fail)
EXPECTED = {
    "prose": ("completed", None),
    "prose_cut": ("truncated", "max_tokens"),
    "code_instead_of_call": ("truncated", "max_tokens"),
    "endless_text": ("truncated", "max_tokens"),
    "json_outside_tags": ("truncated", "max_tokens"),
    "tag_soup_stray_close": ("completed", None),
    "unknown_tool": ("failed", "unknown_tool"),
    "schema_violation": ("failed", "bad_arguments"),
    "half_tool_call": ("failed", "malformed_call"),
    "invalid_json": ("failed", "malformed_call"),
}


class Recorded(Backend):
    """Answers every request with one recorded output, decoded as the transformers backend decodes samples."""

    name = "transformers"

    def __init__(self, tokenizer, text: str, finish_reason: str):
        super().__init__(ModelSpec(model="SmolLM2-135M-Instruct-Q4_1"))
        self.tokenizer, self.text, self.finish_reason = tokenizer, text, finish_reason
        self.completions: list[Completion] = []

    async def _generate(self, messages, tools, params):
        prompt = self.tokenizer.encode(render_prompt(self.tokenizer, messages, tools), add_special_tokens=False)
        ids = self.tokenizer.encode(self.text, add_special_tokens=False)
        stop = self.finish_reason == "stop"
        ids += [self.tokenizer.convert_tokens_to_ids("<|im_end|>")] if stop else []
        c = decode_completion(self.tokenizer, prompt, ids, None, self.finish_reason, tools, ends_with_stop_token=stop)
        self.completions.append(c)
        return [c]


@pytest.fixture(scope="module")
def smollm2_tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


def test_the_recordings_cover_every_kind():
    assert sorted({r["kind"] for r in RECORDED}) == sorted(EXPECTED)


def test_every_recorded_output_ends_as_a_row_with_a_status_and_a_reason(
    smollm2_tokenizer, example_servers, example_servers_config
):
    ids = {r["name"]: r["server_id"] for r in example_servers}
    task = {
        "task_id": "hours-then-add",
        "question": "Convert 3 hours to minutes, then add 25 minutes. How many minutes is that?",
        "server_ids": [ids["calculator"], ids["units"]],
        "verifier": {"kind": "tool_outcome", "spec": json.dumps({"answer": "205"})},
    }
    expected_call = [Expected("convert", {"value": [3], "from_unit": ["h"], "to_unit": ["min"]})]

    async def run_all():
        out = []
        async with ToolEnv(example_servers, config=example_servers_config) as env:
            for r in RECORDED:
                backend = Recorded(smollm2_tokenizer, r["text"], r["finish_reason"])
                params = SamplingParams(temperature=0.7, max_tokens=128)
                solved = await solve(task, backend, env, params, AgentLimits(max_turns=3), sample_index=0, seed=0)
                out.append((r, solved, backend.completions[0]))
        return out

    for r, solved, completion in asyncio.run(run_all()):
        row = solved.attempt.trajectory
        S.to_batch("trajectories", [row])  # a complete row of the table's schema
        assert (row["status"], row["reason_code"]) == EXPECTED[r["kind"]], (r["kind"], row["reason"])
        assert row["status"] == "completed" or row["reason"], r["kind"]
        assert solved.result.verdict == "fail", (r["kind"], solved.result)  # judged wrong, not an error to retry
        calls, malformed, stored = read_calls(completion)  # the same output replayed by eval tools
        verdict = score_turn(expected_call, {}, calls, malformed)
        assert not verdict.correct and verdict.reason, (r["kind"], verdict)
        json.dumps(stored)  # what the eval_tools row stores
