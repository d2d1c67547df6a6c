"""attempt(): one try at any task, for pass@k, evaluation and training; faults are data."""

from __future__ import annotations

import json

from trajkit.envs.agent import AgentLimits, episode_seed
from trajkit.envs.discovery import discover
from trajkit.envs.env import ToolEnv
from trajkit.envs.solve import attempt, solve, task_prompt
from trajkit.models.base import SamplingParams

PARAMS = SamplingParams(temperature=0.0, max_tokens=64)


async def test_tool_task_runs_the_agent_loop(raw_server, scripted_openai):
    cfg = raw_server("--no-readonly")
    rows = await discover({"raw": cfg})
    state = [{"server": "raw", "tool": "count", "arguments": {}, "expected": "2", "match": "exact"}]
    task = {
        "task_id": "t",
        "question": "count once",
        "server_ids": [rows[0]["server_id"]],
        "verifier": {"kind": "tool_outcome", "spec": json.dumps({"answer": "done", "state": state})},
    }

    def script(messages, tools, body):
        if messages[-1]["role"] == "user":
            return {"tool_calls": [{"name": "count", "arguments": {}}]}
        return "done"

    _, backend = scripted_openai(script)
    async with ToolEnv(rows, config={"raw": cfg}) as env:
        a = await attempt(task, backend, env, PARAMS, AgentLimits(), sample_index=2, seed=5)
        assert (a.completion, a.error, a.context) == ("done", None, {"end_state": ["2"]})
        assert a.trajectory["rollout_index"] == 2 and a.trajectory["sampling"]["seed"] == 5

        _, bad = scripted_openai(lambda m, t, b: {"tool_calls": [{"name": "nope", "arguments": {}}]})
        a = await attempt(task, bad, env, PARAMS, AgentLimits(), sample_index=0, seed=None)
        assert a.completion is None and a.error is None  # the model's mistake: a wrong answer, not an error
        assert a.trajectory["status"] == "failed"

    crashing = task | {"question": "crash"}
    _, backend = scripted_openai(lambda m, t, b: {"tool_calls": [{"name": "crash", "arguments": {}}]})
    async with ToolEnv(rows, config={"raw": cfg}) as env:
        a = await attempt(crashing, backend, env, PARAMS, AgentLimits(), sample_index=0, seed=None)
    assert a.completion is None and "exited during crash" in a.error
    assert not a.transient  # a tool that crashes on this input: a retry would crash it again

    a = await attempt(task, backend, None, PARAMS, AgentLimits(), sample_index=0, seed=None)
    assert a.error == "a tool task needs a ToolEnv (harvested servers)"


async def test_code_and_math_tasks_are_one_completion(scripted_openai):
    server, backend = scripted_openai(lambda m, t, b: "```python\ndef add(a, b):\n    return a + b\n```")
    code = {
        "task_id": "c",
        "question": 'def add(a, b):\n    """Add."""\n',
        "verifier": {"kind": "unit_tests", "spec": "{}"},
        "metadata": json.dumps({"entry_point": "add"}),
    }
    a = await attempt(code, backend, None, PARAMS, AgentLimits(), sample_index=0, seed=3)
    assert a.completion.startswith("```python") and a.trajectory is None and a.error is None
    body = server.chat_requests[0]
    assert body["messages"] == [{"role": "user", "content": task_prompt(code)}] and body["seed"] == 3
    assert "tools" not in body
    assert task_prompt(code).endswith("Write the complete function `add` in a single ```python code block.")
    assert task_prompt({"question": "1+1?", "verifier": {"kind": "math"}}).endswith("final answer in \\boxed{}.")
    assert "standard input" in task_prompt({"question": "sum", "verifier": {"kind": "stdio"}})

    def broken(messages, tools, body):
        raise RuntimeError("down")

    _, backend = scripted_openai(broken, max_retries=0)
    a = await attempt(code, backend, None, PARAMS, AgentLimits(), sample_index=0, seed=None)
    assert a.completion is None and a.error.startswith("model error: HTTP 500") and a.transient


async def test_solve_judges_an_attempt_with_the_tasks_verifier(scripted_openai, sandbox_pool):
    _, backend = scripted_openai(lambda m, t, b: "```python\ndef add(a, b):\n    return a + b\n```")
    code = {
        "task_id": "c",
        "question": 'def add(a, b):\n    """Add."""\n',
        "verifier": {"kind": "unit_tests", "spec": json.dumps({"test": "assert add(1, 2) == 3"})},
        "metadata": json.dumps({"entry_point": "add"}),
    }
    solved = await solve(code, backend, None, PARAMS, AgentLimits(), sample_index=0, seed=1, sandbox=sandbox_pool)
    assert (solved.result.verdict, solved.result.score, solved.attempt.error) == ("pass", 1.0, None)

    _, down = scripted_openai(lambda m, t, b: 1 / 0, max_retries=0)
    failed = await solve(code, down, None, PARAMS, AgentLimits(), sample_index=0, seed=1, sandbox=sandbox_pool)
    assert failed.result.verdict == "error" and failed.result.details["transient"] is True
    assert failed.result.details["reason"].startswith("model error: HTTP 500")


def test_episode_seeds_depend_on_what_defines_the_attempt():
    seeds = {episode_seed(0, t, i) for t in ("a", "b") for i in range(3)}
    assert len(seeds) == 6 and episode_seed(0, "a", 0) == episode_seed(0, "a", 0)
    assert episode_seed(1, "a", 0) != episode_seed(0, "a", 0) and all(0 <= s < 2**31 for s in seeds)


def is_three(completion, spec, context):
    return completion.strip() == "3"


async def test_solver_starts_the_sandbox_only_for_verifiers_that_run_code(scripted_openai, monkeypatch, tmp_path):
    import contextlib

    from trajkit.envs.solve import Solver
    from trajkit.models import ModelSpec, make_backend
    from trajkit.models.accounting import Usage

    server, _ = scripted_openai(lambda m, t, b: "3")
    spec = ModelSpec(model="scripted", backend="openai", base_url=server.base_url, cache=False, max_retries=0)
    custom = {
        "task_id": "m",
        "question": "What is 1 plus 2?",
        "verifier": {"kind": "custom", "spec": json.dumps({"path": "tests.envs.test_solve:is_three"})},
    }
    code = {"task_id": "c", "question": "def f(): ...", "verifier": {"kind": "unit_tests", "spec": "{}"}}
    started = []

    @contextlib.contextmanager
    def fake_sandbox(kind, workers, share):
        started.append(kind)
        yield "sandbox"

    monkeypatch.setattr("trajkit.verify.backends.make_sandbox", fake_sandbox)
    usage = Usage()
    kwargs = {"params": PARAMS, "limits": AgentLimits(), "seed": 0, "backend": lambda s: make_backend(s, usage)}
    async with Solver([spec], [custom], [], **kwargs) as solver:
        solved = await solver.solve(custom, "scripted", 0)
        assert solver.sandbox is None and started == []
    assert (solved.result.verdict, solved.result.score) == ("pass", 1.0)
    async with Solver([spec], [custom, code], [], **kwargs) as solver:
        assert solver.sandbox == "sandbox" and started == ["local"]
