"""Multi-turn tool-use GRPO against the project's real MCP servers (calculator: pooled, kv: fresh per rollout)."""

from __future__ import annotations

import json
import re

import pytest

from tests.train.conftest import KV_QUESTION
from trajkit.store import Store


def _ids(server_rows):
    return {r["name"]: r["server_id"] for r in server_rows}


@pytest.fixture(scope="module")
def tool_trainer(tool_model_dir, server_rows, tmp_path_factory):
    """A GRPOTrainer over two environments (kv; calculator+kv) built the way the GRPO stage builds it."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from trajkit.envs.solve import grpo_rows
    from trajkit.train.rewards import format_reward
    from trajkit.train.tools import environment_factories
    from trajkit.train.weights import load_model, load_tokenizer

    ids = _ids(server_rows)
    store = Store(tmp_path_factory.mktemp("run"), create=True)
    store.write("servers", "harvest", server_rows)
    task = {
        "task_id": "kv",
        "question": KV_QUESTION,
        "mode": "single_tool",
        "server_ids": [ids["kv"]],
        "verifier": None,
    }
    rows = grpo_rows([task])
    tok = load_tokenizer(str(tool_model_dir))
    tools = environment_factories(store, {rows[0]["environment"], f"{ids['calculator']}+{ids['kv']}"}, tok)
    args = GRPOConfig(
        output_dir=str(tmp_path_factory.mktemp("trainer")),
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=64,
        temperature=0.5,
        report_to="none",
        bf16=False,
        gradient_checkpointing=False,
    )
    trainer = GRPOTrainer(
        model=load_model(str(tool_model_dir)),
        reward_funcs=[format_reward],
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        environment_factory=tools.factories,
    )
    yield trainer, rows, tok, tools
    tools.close()


def _tools_block(text: str) -> str:
    m = re.search(r"<tools>.*</tools>", text, re.DOTALL)
    assert m, text
    return m.group(0)


def test_trl_renders_the_tool_block_synthesis_rendered(tool_trainer, server_rows):
    from trajkit.envs.tools import tool_schemas
    from trajkit.models.chat import render_prompt

    trainer, _, tok, _ = tool_trainer
    ids = _ids(server_rows)
    prompt = [{"role": "user", "content": "What is 2 + 3? Then remember it."}]
    for server_ids in ([ids["calculator"], ids["kv"]], [ids["kv"]]):
        trainer._batch_environments = ["+".join(server_ids)]
        prompt_ids, _, _ = trainer._tokenize_prompts([prompt])
        trl_text = tok.decode(prompt_ids[0])
        synth_text = render_prompt(tok, prompt, tool_schemas(server_rows, server_ids))
        assert _tools_block(trl_text) == _tools_block(synth_text)
        assert trl_text == synth_text
    # MCP input schemas survive verbatim (titles, constraints) — a signature-derived schema would lose them
    rendered = [json.loads(line) for line in _tools_block(trl_text).splitlines() if line.startswith("{")]
    (kv_get,) = [t for t in rendered if t["function"]["name"] == "get"]
    assert kv_get["function"]["parameters"]["properties"]["key"]["maxLength"] == 200


def test_tool_calls_run_on_the_server_and_tool_output_is_masked(tool_trainer):
    trainer, rows, tok, _ = tool_trainer
    trainer.model.train()
    out = trainer._generate_and_score_completions([dict(rows[0]), dict(rows[0])])
    mask, ids = out["tool_mask"], out["completion_ids"]
    called = 0
    for i in range(len(ids)):
        masked = [
            t for t, m, c in zip(ids[i].tolist(), mask[i].tolist(), out["completion_mask"][i].tolist()) if c and not m
        ]
        trained = [
            t for t, m, c in zip(ids[i].tolist(), mask[i].tolist(), out["completion_mask"][i].tolist()) if c and m
        ]
        if masked:
            called += 1
            assert "ok: x = 7" in tok.decode(masked)  # the kv server's answer, excluded from the loss
            assert "ok: x = 7" not in tok.decode(trained)
            assert "<tool_call>" in tok.decode(trained)  # the model's own call is trained on
    assert called >= 1


def test_stateful_server_is_fresh_for_every_rollout(tool_trainer, server_rows):
    trainer, rows, _, _ = tool_trainer
    env = trainer.environment_factories[rows[0]["environment"]]()
    env.reset()
    assert env.set(key="x", value="1") == "ok: x = 1"
    assert env.get(key="x") == "1"
    env.reset()  # the next rollout: a new kv process with an empty store
    assert "no such key" in env.get(key="x")
    from trajkit.train.tools import close_environment

    close_environment(env)


def test_the_factories_record_every_environment_they_make_and_close_ends_them(tool_trainer, server_rows, tmp_path):
    import psutil

    from trajkit.train.tools import McpEnvironment, environment_factories

    trainer, rows, tok, tools = tool_trainer
    pooled = [e for pool in trainer._environment_pool.values() for e in pool]  # TRL's own record, to compare with
    assert pooled and all(any(e is made for made in tools.instances) for e in pooled)

    store = Store(tmp_path / "run", create=True)
    store.write("servers", "harvest", server_rows)
    own = environment_factories(store, {rows[0]["environment"]}, tok)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    env = own.factories[rows[0]["environment"]]()
    assert isinstance(env, McpEnvironment) and own.instances == [env]
    env.reset()
    assert env.set(key="x", value="1") == "ok: x = 1"  # a fresh kv process for this rollout
    assert {p.pid for p in psutil.Process().children(recursive=True)} - before
    own.close()
    assert env._episode is None and own.instances == []
    assert not {p.pid for p in psutil.Process().children(recursive=True)} - before  # its server process exited


def test_grpo_stage_with_tools_rewards_the_servers_end_state(tool_model_dir, server_rows, tmp_path):
    from trajkit.runner import run_stage
    from trajkit.train.grpo import GRPO, GRPOStageConfig

    ids = _ids(server_rows)
    store = Store(tmp_path / "run", create=True)
    store.write("servers", "harvest", server_rows)
    spec = {
        "state": [{"server": ids["kv"], "tool": "get", "arguments": {"key": "x"}, "expected": "7", "match": "exact"}]
    }
    task = {
        "task_id": "kv",
        "question": KV_QUESTION,
        "mode": "single_tool",
        "server_ids": [ids["kv"]],
        "verifier": {"kind": "tool_outcome", "spec": json.dumps(spec)},
    }
    store.write("tasks", "import", [task])
    cfg = GRPOStageConfig(
        model=str(tool_model_dir),
        steps=1,
        data={"split": None},
        rewards=[{"name": "correctness"}, {"name": "tool_calls"}],
        grpo={"num_generations": 2, "per_device_train_batch_size": 2, "max_completion_length": 64, "temperature": 0.5},
    )
    manifest = run_stage(store, GRPO, cfg, name="grpo-tools", quiet=True)
    (row,) = store.rows("train_metrics")
    logs = json.loads(row["metrics"])
    assert logs["tools/call_frequency"] > 0
    assert row["pass_rate"] > 0  # x = 7 was read back from the rollout's own kv process
    assert logs["rewards/tool_call_reward/mean"] > 0
    assert (tmp_path / "run" / "models" / "grpo-tools" / "model.safetensors").is_file()
    assert manifest["summary"]["tasks"] == 1
