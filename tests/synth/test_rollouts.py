"""synth.rollouts: over-sampling to a target, outcome probes on a stateful server, dying servers, custom loops."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time

import pytest

from tests.fixtures.synth import model, stage, with_servers
from tests.synth.brain import Brain
from trajkit.errors import UserError
from trajkit.models.scripted_server import ScriptedServer
from trajkit.store import Store
from trajkit.synth.rollouts import accepted
from trajkit.verify import verify


def _copy_tasks(src, dst, servers):
    """A run with the servers and the tasks (and their rejections) of another run."""
    run = with_servers(dst, servers)
    store, source = Store(run), Store(src)
    store.write("tasks", "tasks", source.rows("tasks"))
    store.write("rejected", "tasks", source.rows("rejected", stage="tasks"))
    return run


def test_target_stops_at_n_accepted_and_aborts_the_rest(tmp_path, calculator_rows, clean_pipeline):
    run = _copy_tasks(clean_pipeline, tmp_path / "run", calculator_rows)
    rules = ["no_tool_call", "empty_final_answer"]
    with ScriptedServer(Brain(), delay_s=0.05) as server:
        cfg = {
            "model": model(server),
            "rollouts_per_task": 2,
            "target": 6,
            "concurrency": 4,
            "pool_size": 1,
            "accept_rules": rules,
        }
        stage(run, "synth.rollouts", cfg)
        store = Store(run)
        rows = store.rows("trajectories")
        assert sum(accepted(r, rules) for r in rows) == 6
        aborted = [r for r in rows if r["status"] == "aborted"]
        assert all(r["reason"] == "target reached" and r["messages"] is None for r in aborted)
        assert {(r["reason_code"], r["verdict"]) for r in aborted} == {("target_reached", None)}
        assert {r["verdict"] for r in rows if accepted(r, rules)} <= {"pass", None}  # a failed verdict is not accepted
        n_tasks = len(store.ids("tasks") - store.rejected("tasks"))
        assert len(rows) < 2 * n_tasks  # it stopped early
        assert {r["rollout_index"] for r in rows if r["status"] != "aborted"} == {0}  # breadth first

        # lose two accepted rows, as if never written: the rerun retries aborted work to reach the target again
        lost = {r["traj_id"] for r in rows if accepted(r, rules)}
        lost = set(sorted(lost)[:2])
        store.drop_rows("trajectories", "rollouts", lost)
        (store.stage_dir("rollouts") / "_manifest.json").unlink()
        manifest = stage(run, "synth.rollouts", cfg)
    again = store.rows("trajectories")
    assert sum(accepted(r, rules) for r in again) == 6
    assert len({r["traj_id"] for r in again}) == len(again)
    assert manifest["counts"]["resumed.retried_aborted"] == len(aborted)
    # ids are inputs, not outputs: the lost rows come back, and each aborted row is run again or aborted again
    assert lost | {r["traj_id"] for r in aborted} <= {r["traj_id"] for r in again}


def test_stateful_server_end_state_feeds_the_outcome_check(tmp_path):
    from trajkit.envs.config import ServerConfig
    from trajkit.envs.discovery import discover

    kv = ServerConfig(command=sys.executable, args=["-m", "trajkit.envs.servers.kv"])
    synth_run = with_servers(tmp_path / "run", asyncio.run(discover({"kv": kv})))
    with ScriptedServer(Brain(garbage=0)) as server:
        tasks = {
            "model": model(server),
            "modes": ["single_tool"],
            "sampling": "list",
            "servers": ["kv"],
            "requests_per_mode": 1,
            "k": 1,
        }
        stage(synth_run, "synth.tasks", tasks)
        stage(synth_run, "synth.rollouts", {"model": model(server), "pool_size": 1})
    store = Store(synth_run)
    [task] = store.rows("tasks")
    spec = json.loads(task["verifier"]["spec"])
    [probe] = spec["state"]
    assert task["verifier"]["kind"] == "tool_outcome" and probe["server"] == "kv" and probe["tool"] == "get"
    [traj] = store.rows("trajectories")
    assert traj["status"] == "completed" and traj["tools_called"] == ["set"]
    assert traj["end_state"] == [probe["expected"]]
    assert verify(task["verifier"], traj["final_answer"], {"end_state": traj["end_state"]}).verdict == "pass"
    assert traj["verdict"] == "pass"  # the stage judged it so itself


def _agent(messages, tools, body):
    """Calls the raw test server's tool that the question names, then answers."""
    last = messages[-1]
    if not tools:
        return "Looks fine to me overall!"  # an unreadable judgment
    if last["role"] == "tool":
        return f"Done: {last['content']}"
    if "again" in last["content"]:
        time.sleep(8)  # past the client's timeout: the model "died" for this request
    return {"content": None, "tool_calls": [{"name": last["content"].split()[1], "arguments": {"text": "hi"}}]}


def test_dying_servers_and_models_fail_rows_not_runs(tmp_path, raw_server):
    from trajkit.envs.discovery import discover

    servers = asyncio.run(discover({"raw": raw_server()}))
    run = with_servers(tmp_path / "run", servers)
    tasks = [
        {
            "task_id": f"t-{tool}",
            "question": f"Please {tool} now.",
            "target_tools": [tool],
            "server_ids": [servers[0]["server_id"]],
            "mode": "single_tool",
        }
        for tool in ("echo", "crash", "hang", "fail", "junk", "echo2")
    ]
    tasks[-1]["question"] = "Please echo again."
    Store(run).write("tasks", "import", tasks)
    with ScriptedServer(_agent) as server:
        cfg = {
            "model": model(server, timeout_s=3, max_retries=0),
            "tool_timeout_s": 1,
            "where": "task_id <> 't-junk'",
            "concurrency": 1,
        }
        manifest = stage(run, "synth.rollouts", cfg)
        judged = stage(run, "synth.judge", {"model": model(server, max_retries=0)})
    rows = {r["task_id"]: r for r in Store(run).rows("trajectories")}
    assert manifest["counts"]["rows.trajectories"] == 5 and "t-junk" not in rows  # `where` chose the tasks
    assert rows["t-echo"]["status"] == "completed" and rows["t-echo"]["final_answer"] == "Done: hi"
    assert rows["t-crash"]["status"] == "failed" and "crash" in rows["t-crash"]["reason"]
    assert rows["t-hang"]["status"] == "failed" and "timed out" in rows["t-hang"]["reason"]
    assert rows["t-fail"]["status"] == "completed", rows["t-fail"]["reason"]
    assert rows["t-fail"]["messages"][3]["content"].startswith("Error")  # after the system, user and call messages
    assert rows["t-echo2"]["status"] == "failed" and rows["t-echo2"]["reason"].startswith("model error")
    codes = {t: r["reason_code"] for t, r in rows.items()}
    assert codes == {
        "t-echo": None,
        "t-crash": "server_crash",
        "t-hang": "timeout",
        "t-fail": None,
        "t-echo2": "model_error",
    }
    assert {r["verdict"] for r in rows.values()} == {None}  # these tasks have no verifier
    # the judge's unreadable answers are nulls with reasons; the run still completes
    quality = Store(run).rows("trajectory_quality")
    assert judged["counts"]["trajectory_quality.unparsed"] == len(quality) > 0
    assert all(q["completeness"] is None and q["judge_raw"] == "Looks fine to me overall!" for q in quality)
    filtered = stage(run, "synth.filter", {})
    by_reason: dict[str, set[str]] = {}
    ids = {r["traj_id"]: r["task_id"] for r in rows.values()}
    for r in Store(run).rows("rejected", stage="filter"):
        by_reason.setdefault(r["reason"], set()).add(ids[r["row_id"]])
    assert by_reason["status_failed"] == {"t-crash", "t-hang", "t-echo2"}
    assert by_reason["all_tool_errors"] == {"t-crash", "t-hang", "t-fail"}  # a failed call leaves an error result
    # an unreadable judgment is never taken as a pass: every trajectory's was unreadable
    assert by_reason["judge_unreadable"] == set(ids.values())
    assert filtered["counts"]["kept"] == 5 - len(set().union(*by_reason.values())) == 0


def test_an_episode_whose_model_request_failed_runs_again_on_resume(tmp_path, calculator_rows, clean_pipeline):
    from trajkit.models.scripted_server import Fault

    run = _copy_tasks(clean_pipeline, tmp_path / "run", calculator_rows)
    with ScriptedServer(Brain(garbage=0), faults={0: Fault.error(503), 1: Fault.error(503)}) as server:
        cfg = {"model": model(server), "concurrency": 1, "pool_size": 1}
        first = stage(run, "synth.rollouts", cfg)
        store = Store(run)
        failed = [r for r in store.rows("trajectories") if (r["reason"] or "").startswith("model error: HTTP 503")]
        assert len(failed) == 1 and failed[0]["status"] == "failed"
        store.manifest_path("rollouts").unlink()  # as a kill before the manifest leaves it: the stage resumes
        again = stage(run, "synth.rollouts", cfg)
    rows = {r["traj_id"]: r for r in store.rows("trajectories")}
    assert len(rows) == first["counts"]["rows.trajectories"] == again["counts"]["rows.trajectories"]
    assert "HTTP 503" not in (rows[failed[0]["traj_id"]]["reason"] or "")  # the same episode, run again
    assert again["counts"]["retried"] == 1


def test_a_custom_verifier_that_does_not_import_stops_rollouts_before_any_episode(synth_run):
    verifier = {"kind": "custom", "spec": json.dumps({"path": "no_such_module_xyz:check"})}
    Store(synth_run).write(
        "tasks", "import", [{"task_id": "t", "question": "Add 1 and 2.", "mode": "imported", "verifier": verifier}]
    )
    unreachable = {"model": "m", "backend": "openai", "base_url": "http://127.0.0.1:9/v1", "max_retries": 0}
    with pytest.raises(UserError, match="no_such_module_xyz"):
        stage(synth_run, "synth.rollouts", {"model": unreachable})
    assert Store(synth_run).count("trajectories") == 0


def test_a_rerun_retries_by_reason_code_never_by_the_reasons_text(tmp_path):
    """A server crash whose stderr says "timed out after" stays; a row coded timeout or model_error runs again."""
    from trajkit.runner import StageContext
    from trajkit.schema import content_id
    from trajkit.synth.rollouts import retry_transient

    store = Store(tmp_path / "run", create=True)
    reasons = {
        "crash": ("tool t (s) failed: server 's' exited (stderr: upstream timed out after 3s)", "server_crash"),
        "hang": ("tool t (s) failed: t timed out after 30s", "timeout"),
        "model": ("model error: 502 Bad Gateway", "model_error"),
    }
    rows = [
        {
            "traj_id": content_id(name),
            "task_id": name,
            "rollout_index": 0,
            "status": "failed",
            "reason": r,
            "reason_code": c,
        }
        for name, (r, c) in reasons.items()
    ]
    store.write("trajectories", "rollouts", rows)
    assert retry_transient(StageContext(store, "rollouts", "synth.rollouts"), None) == 2
    assert [r["task_id"] for r in store.rows("trajectories")] == ["crash"]


def _adder(messages, tools, body):
    """Calls the calculator's add once, then answers."""
    if messages[-1]["role"] == "tool":
        return f"Answer: {messages[-1]['content']}"
    return {"content": None, "tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]}


def test_an_unreachable_http_server_fails_its_rows_and_alone_ends_the_stage(tmp_path, calculator_rows):
    """Where another server answers, episodes on an unreachable HTTP server are rows (reason names the URL,
    code unreachable: retried on rerun); when no episode reached any server, the stage is one line, exit 2."""
    from trajkit.schema import content_id

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_url = f"http://127.0.0.1:{s.getsockname()[1]}/mcp"  # nothing listens once the block ends
    dead = {**calculator_rows[0], "name": "gone", "url": dead_url, "server_id": content_id("gone", dead_url)}
    run = with_servers(tmp_path / "run", [*calculator_rows, dead])
    tasks = [
        {"task_id": f"{name}-{i}", "question": f"Add 1 and 2 ({i}).", "target_tools": ["add"], "server_ids": [sid]}
        for name, sid in (("live", calculator_rows[0]["server_id"]), ("dead", dead["server_id"]))
        for i in range(2)
    ]
    Store(run).write("tasks", "import", [{**t, "mode": "single_tool"} for t in tasks])
    with ScriptedServer(_adder) as server:
        stage(run, "synth.rollouts", {"model": model(server), "concurrency": 2, "pool_size": 1})
        rows = {r["task_id"]: r for r in Store(run).rows("trajectories")}
        assert {t: r["status"] for t, r in rows.items()} == {
            "live-0": "completed",
            "live-1": "completed",
            "dead-0": "failed",
            "dead-1": "failed",
        }
        assert rows["dead-0"]["reason_code"] == "unreachable" and f"cannot reach {dead_url}" in rows["dead-0"]["reason"]
        with pytest.raises(UserError) as err:
            stage(run, "synth.rollouts", {"model": model(server), "where": "task_id LIKE 'dead%'"}, name="dead")
    message = str(err.value)
    assert message.startswith("all 2 episodes failed: tool add (gone) failed: cannot reach " + dead_url)
    assert "\n" not in message and not Store(run).manifest_path("dead").exists()


def test_ctrl_c_during_rollouts_prints_one_line_and_the_rerun_finishes(tmp_path, example_servers):
    """A real SIGINT to the stage's process group, as a terminal's Ctrl-C, while episodes are in flight on
    contained stdio servers (forked from their zygotes) with results checked against output schemas (the
    checking process): one line, no traceback from any helper process; the rerun runs each episode once."""
    import os
    import signal
    import subprocess
    import threading

    called = threading.Event()

    def agent(messages, tools, body):
        if messages[-1]["role"] == "tool":
            called.set()
            time.sleep(0.3)  # episodes stay in flight
            return "Answer: stored"
        return {"content": None, "tool_calls": [{"name": "set", "arguments": {"key": "a", "value": "1"}}]}

    run = with_servers(tmp_path / "run", example_servers)
    kv = next(r["server_id"] for r in example_servers if r["name"] == "kv")
    tasks = [
        {"task_id": f"t{i}", "question": f"Store a = {i}.", "target_tools": ["set"], "server_ids": [kv]}
        for i in range(2)
    ]
    Store(run).write("tasks", "import", [{**t, "mode": "single_tool"} for t in tasks])
    with ScriptedServer(agent) as server:
        argv = ["synth", "rollouts", "-r", str(run), "--model", "scripted", "--backend", "openai"]
        argv += ["--base-url", server.base_url, "--concurrency", "2"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "trajkit.cli", *argv],
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "COLUMNS": "200"},
        )
        assert called.wait(120), proc.communicate(timeout=60)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        lines = [ln for ln in (out + err).splitlines() if not ln.startswith("rollouts")]  # the progress lines
        assert lines == ["interrupted; rerun the same command to resume"], out + err
        manifest = stage(run, "synth.rollouts", {"model": model(server), "concurrency": 2})
    rows = Store(run).rows("trajectories")
    assert sorted(r["task_id"] for r in rows) == [t["task_id"] for t in tasks]  # each episode once
    assert manifest["counts"]["status.completed"] == len(tasks)
