"""The Ray executor on a real two-node cluster: the same tables as the local executor, shards spread
over the nodes, per-rank manifests as with ranks run by hand."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import pyarrow.parquet as pq
import pytest

from tests.curate.test_passk import K, _model, coder
from tests.fixtures.synth import model, pipeline_configs, stage, with_servers
from tests.synth.compare import assert_same_output
from trajkit.clikit import run_command
from trajkit.confine import start
from trajkit.errors import UserError
from trajkit.models.scripted_server import ScriptedServer
from trajkit.store import Store

TIMINGS = {"runtime_s", "model_s", "tools_s", "total_s"}


class ShardKiller(threading.Thread):
    """SIGKILLs the first Ray shard process found with a descendant whose command line holds ``child``
    (mid-shard: 0.5 s later); then checks that every process the shard had started died with it."""

    def __init__(self, child: str):
        super().__init__(daemon=True)
        self.child, self.killed, self.children, self.commands = child, None, [], []
        self.start()

    def run(self) -> None:
        import psutil

        deadline = time.monotonic() + 60
        while self.killed is None and time.monotonic() < deadline:
            for p in psutil.process_iter(["pid", "cmdline"]):
                try:
                    if "ray::_shard" not in " ".join(p.info["cmdline"] or []):
                        continue
                    if not any(self.child in " ".join(c.cmdline()) for c in p.children(recursive=True)):
                        continue
                    time.sleep(0.5)
                    if "ray::_shard" not in " ".join(p.cmdline()):  # the task ended meanwhile: not mid-shard
                        continue
                    self.children = p.children(recursive=True)
                    self.commands = [" ".join(c.cmdline()) for c in self.children]
                    os.kill(p.pid, signal.SIGKILL)
                    self.killed = p.pid
                    return
                except psutil.Error:  # a process that ended while looked at
                    continue
            time.sleep(0.05)

    def assert_nothing_outlived_the_shard(self) -> None:
        import psutil

        self.join()
        assert self.killed is not None and not psutil.pid_exists(self.killed)
        assert any(self.child in c for c in self.commands), self.commands
        _, alive = psutil.wait_procs(self.children, timeout=10)
        assert not [c.pid for c in alive if _running(c)], [self.commands[self.children.index(c)] for c in alive]


def _running(process) -> bool:
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_rollouts_on_ray_equal_local(tmp_path, ray_cluster, calculator_rows, model_server, capsys):
    base = with_servers(tmp_path / "base", calculator_rows)
    cfgs = pipeline_configs(model_server)
    stage(base, "synth.tasks", cfgs["tasks"])
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    shutil.copytree(base, local)
    shutil.copytree(base, on_ray)
    rollouts = {"model": model(model_server), "pool_size": 1, "concurrency": 4}
    assert stage(local, "synth.rollouts", rollouts)["cpus"] == len(os.sched_getaffinity(0))
    capsys.readouterr()
    result = run_command("synth.rollouts", on_ray, {**rollouts}, world_size=2, executor="ray", address=ray_cluster)
    manifests = result["shards"]
    # the driver shows the items done across both shards, from the files they keep and it removes at the end
    (last,) = re.findall(r"^rollouts \(2 shards\): (\d+) of (\d+) in \d+s$", capsys.readouterr().err, re.MULTILINE)[-1:]
    trajectories = Store(on_ray).count("trajectories", stage="rollouts")
    assert last == (str(trajectories), str(trajectories)) and trajectories > 2
    assert not list(Store(on_ray).stage_dir("rollouts").glob("_progress*"))
    assert [m["rank"] for m in manifests] == [0, 1] and all(m["counts"] for m in manifests)
    assert len({m["node"] for m in manifests}) >= 1
    assert [Store(on_ray).manifest("rollouts", r, 2)["rank"] for r in (0, 1)] == [0, 1]
    # each node has 1 CPU, whatever this machine has: a shard's pools size from the CPU Ray gave it
    assert [m["cpus"] for m in manifests] == [1, 1]
    assert_same_output(local, on_ray, "rollouts")
    # a rerun finds every shard complete and writes nothing
    again = run_command("synth.rollouts", on_ray, {**rollouts}, world_size=2, executor="ray", address=ray_cluster)
    assert [m["finished_at"] for m in again["shards"]] == [m["finished_at"] for m in manifests]


def test_passk_on_ray_equal_local(tmp_path, ray_cluster):
    """Also with a shard killed once its sandbox runs: its sandbox workers die with it, Ray retries it."""
    from tests.curate.helpers import run

    local, on_ray = Store(tmp_path / "local", create=True), Store(tmp_path / "ray", create=True)
    for s in (local, on_ray):
        run(s, "curate.import", preset="humaneval", limit=2)
    with ScriptedServer(coder) as server, ScriptedServer(coder, delay_s=0.5) as slow:
        cfg = {"model": _model(server), "k": K, "max_tokens": 512, "concurrency": 2}
        run(local, "curate.passk", **cfg)
        killer = ShardKiller(f"{start.folder()} worker")  # a sandbox worker of the shard's
        cfg["model"] = _model(slow)
        run_command("curate.passk", on_ray.root, cfg, world_size=2, executor="ray", address=ray_cluster)
    killer.assert_nothing_outlived_the_shard()
    for table, key in (("samples", "sample_id"), ("passk", "task_id")):
        a = {r[key]: {k: v for k, v in r.items() if k not in TIMINGS} for r in local.rows(table, stage="passk")}
        b = {r[key]: {k: v for k, v in r.items() if k not in TIMINGS} for r in on_ray.rows(table, stage="passk")}
        assert a and a.keys() == b.keys() and a == b
    assert (
        local.sql("SELECT task_id, difficulty FROM tasks ORDER BY 1").to_pylist()
        == on_ray.sql("SELECT task_id, difficulty FROM tasks ORDER BY 1").to_pylist()
    )


def test_eval_passk_on_ray_reports_every_shard(tmp_path, ray_cluster):
    """``trajkit eval passk --executor ray``: the same rows as the local executor, and the report printed and
    written covers both shards' rows (each shard's own summary saw only what was written by its end)."""
    from typer.testing import CliRunner

    from tests.curate.helpers import run
    from trajkit.cli import app

    local, on_ray = Store(tmp_path / "local", create=True), Store(tmp_path / "ray", create=True)
    for s in (local, on_ray):
        run(s, "curate.import", preset="humaneval", limit=3)
    with ScriptedServer(coder) as server:
        common = ["eval", "passk", "--model", "scripted", "--backend", "openai", "--base-url", server.base_url]
        common += ["--n", "2", "--at", "1", "--set", "split=null", "--concurrency", "2"]
        outs = {}
        for s, extra in ((local, []), (on_ray, ["--executor", "ray", "--world-size", "2", "--address", ray_cluster])):
            res = CliRunner().invoke(app, [*common, "--run", str(s.root), *extra])
            assert res.exit_code == 0, res.output
            outs[s] = res.stdout
    rows = [{k: v for k, v in r.items() if k not in TIMINGS} for r in local.rows("eval_passk")]
    assert len(rows) == 3 and sorted(rows, key=str) == sorted(
        ({k: v for k, v in r.items() if k not in TIMINGS} for r in on_ray.rows("eval_passk")), key=str
    )
    assert outs[local] == outs[on_ray]
    report = "reports/eval_passk.parquet"
    assert pq.read_table(local.root / report).equals(pq.read_table(on_ray.root / report))
    shards = [on_ray.manifest("eval-passk", r, 2)["counts"].get("rows.eval_passk", 0) for r in (0, 1)]
    assert sorted(shards) != [0, 3]  # both shards evaluated tasks


def test_eval_tools_on_ray_reports_every_shard(tmp_path, ray_cluster, clean_pipeline, model_server):
    """``trajkit eval tools --executor ray`` on a synth run's trajectories: the local executor's rows and report."""
    from typer.testing import CliRunner

    from trajkit.cli import app

    outs, runs = {}, {}
    for name, extra in (("local", []), ("ray", ["--executor", "ray", "--world-size", "2", "--address", ray_cluster])):
        runs[name] = tmp_path / name
        shutil.copytree(clean_pipeline, runs[name])
        args = ["eval", "tools", "--run", str(runs[name]), "--model", "scripted", "--backend", "openai"]
        args += ["--base-url", model_server.base_url, "--set", "split=null", *extra]
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
        outs[name] = res.stdout
    rows = {
        n: sorted(({k: v for k, v in r.items() if k not in TIMINGS} for r in Store(run).rows("eval_tools")), key=str)
        for n, run in runs.items()
    }
    assert rows["local"] and rows["local"] == rows["ray"]
    assert outs["local"] == outs["ray"]
    shards = [Store(runs["ray"]).manifest("eval-tools", r, 2)["counts"].get("rows.eval_tools", 0) for r in (0, 1)]
    assert all(shards)


def test_a_worker_killed_mid_shard_is_retried_without_loss_or_duplicates(tmp_path, ray_cluster, stdio_rows, brain):
    """The killed shard's MCP server processes (stdio, started by the shard) die with it; Ray retries it."""
    base = with_servers(tmp_path / "base", stdio_rows)
    with ScriptedServer(brain, delay_s=0.05) as slow:
        stage(base, "synth.tasks", pipeline_configs(slow)["tasks"])
        local, on_ray = tmp_path / "local", tmp_path / "ray"
        shutil.copytree(base, local)
        shutil.copytree(base, on_ray)
        rollouts = {"model": model(slow, cache=False), "pool_size": 1, "concurrency": 1}
        stage(local, "synth.rollouts", rollouts)
        killer = ShardKiller("trajkit.envs.servers.calculator")  # once the shard's own server runs
        run_command("synth.rollouts", on_ray, rollouts, world_size=2, executor="ray", address=ray_cluster)
    killer.assert_nothing_outlived_the_shard()
    assert_same_output(local, on_ray, "rollouts")


def test_without_ray_the_executor_fails_with_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(UserError, match=r"^--executor ray needs Ray: pip install 'trajkit\[ray\]'$"):
        run_command("synth.rollouts", tmp_path, {"model": {"model": "m"}}, world_size=2, executor="ray")


def test_without_an_address_the_run_starts_a_cluster_of_its_own(monkeypatch, tmp_path):
    """Not ``ray.init()`` alone, which joins any cluster already running on the machine (another user's, a
    test's) and then refuses ``num_cpus``. The run's own cluster is stopped at the end and its session folder
    deleted (each left one behind under /tmp/ray); another cluster's session, and one it only joined, stay."""
    from types import SimpleNamespace

    from trajkit.executors import ray as executor

    calls, sessions = [], iter(["session_own", "session_joined"])
    other = tmp_path / "session_other"
    other.mkdir()

    def start(**kw):
        calls.append(kw)
        session = tmp_path / next(sessions)
        (session / "logs").mkdir(parents=True)
        (tmp_path / "session_latest").unlink(missing_ok=True)
        (tmp_path / "session_latest").symlink_to(session)
        return SimpleNamespace(address_info={"session_dir": str(session)})

    class Ray:
        is_initialized = staticmethod(lambda: False)
        init = staticmethod(start)
        shutdown = staticmethod(lambda **kw: calls.append(kw))

    monkeypatch.setattr(executor, "_ray", lambda: Ray)
    with executor.cluster(None):
        assert (tmp_path / "session_own" / "logs").is_dir()
    assert not (tmp_path / "session_own").exists() and not (tmp_path / "session_latest").is_symlink()
    with executor.cluster("127.0.0.1:6379"):
        pass
    assert calls[0]["address"] == "local" and calls[0]["num_cpus"] >= 1 and calls[1] == {"wait_for_processes": True}
    assert calls[2]["address"] == "127.0.0.1:6379" and "num_cpus" not in calls[2]
    assert (tmp_path / "session_joined").is_dir() and other.is_dir() and (tmp_path / "session_latest").is_symlink()


def test_a_killed_driver_takes_its_shards_with_it_and_a_rerun_resumes(tmp_path, ray_cluster, calculator_rows, brain):
    import psutil

    base = with_servers(tmp_path / "base", calculator_rows)
    with ScriptedServer(brain, delay_s=0.05) as slow:
        stage(base, "synth.tasks", pipeline_configs(slow)["tasks"])
        local, on_ray = tmp_path / "local", tmp_path / "ray"
        shutil.copytree(base, local)
        shutil.copytree(base, on_ray)
        rollouts = {"model": model(slow, cache=False), "pool_size": 1, "concurrency": 1}
        stage(local, "synth.rollouts", rollouts)
        config = tmp_path / "rollouts.json"
        config.write_text(json.dumps(rollouts))
        cmd = [sys.executable, "-m", "trajkit.cli", "synth", "rollouts", "--run", str(on_ray), "--config", str(config)]
        driver = subprocess.Popen([*cmd, "--executor", "ray", "--world-size", "2", "--address", ray_cluster])

        def shards() -> list[int]:
            return [
                p.pid for p in psutil.process_iter(["cmdline"]) if "ray::_shard" in " ".join(p.info["cmdline"] or [])
            ]

        deadline = time.monotonic() + 60
        while not shards() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        driver.kill()
        driver.wait()
        assert Store(on_ray).manifest("rollouts", 0, 2) is None or Store(on_ray).manifest("rollouts", 1, 2) is None
        # rerun at once: shards of the dead driver still writing are fenced off by the rerun's leases
        run_command("synth.rollouts", on_ray, rollouts, world_size=2, executor="ray", address=ray_cluster)
        deadline = time.monotonic() + 30
        while shards() and time.monotonic() < deadline:  # Ray ends the dead driver's job and its tasks
            time.sleep(0.1)
        assert not shards()
    assert_same_output(local, on_ray, "rollouts")
    assert not list(on_ray.glob("*/.tmp-*"))


def test_a_node_that_cannot_start_the_servers_fails_its_shard_with_a_reason(
    tmp_path, ray_cluster, stdio_rows, model_server, monkeypatch
):
    """The servers need a variable this driver has and the cluster's nodes lack, or a command the nodes do not
    have: each shard fails at start, and the command fails with one line naming the shard, its node and why."""
    run = with_servers(tmp_path / "run", stdio_rows)
    stage(run, "synth.tasks", pipeline_configs(model_server)["tasks"])
    monkeypatch.setenv("TRAJKIT_NODE_TOKEN", "only-on-the-driver")
    calculator = {"command": sys.executable, "args": ["-m", "trajkit.envs.servers.calculator"]}
    for server, why in (
        ({**calculator, "env": {"TOKEN": "${TRAJKIT_NODE_TOKEN}"}}, r"TRAJKIT_NODE_TOKEN is not set"),
        ({"command": "trajkit-test-no-such-server"}, r"command 'trajkit-test-no-such-server' not found"),
    ):
        servers = tmp_path / "servers.json"
        servers.write_text(json.dumps({"mcpServers": {"calculator": server}}))
        rollouts = {"model": model(model_server), "servers_config": str(servers)}
        with pytest.raises(UserError, match=rf"^shard [01] on node \w{{8}} \(\S+\): server 'calculator': .*{why}"):
            run_command("synth.rollouts", run, rollouts, world_size=2, executor="ray", address=ray_cluster)
        assert not Store(run).shards("trajectories")


def test_nodes_running_other_code_are_refused(tmp_path, ray_cluster, monkeypatch):
    from trajkit import runner

    monkeypatch.setattr(runner, "code_version", lambda: "0.1.0+edited")
    with pytest.raises(UserError, match=r"^nodes run another trajkit version than this driver \(0\.1\.0\+edited\)"):
        run_command(
            "synth.rollouts", tmp_path, {"model": {"model": "m"}}, world_size=2, executor="ray", address=ray_cluster
        )


def test_fresh_on_ray_reuses_no_cached_answer_unless_asked(tmp_path, ray_cluster, calculator_rows, brain):
    """``--executor ray --fresh`` still answered from the call cache: the shards ran unfresh under the driver's
    drop (issue 34 item 4). The driver pins the fresh time once; a dead endpoint then fails the stage."""
    import socket

    run = with_servers(tmp_path / "run", calculator_rows)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    with ScriptedServer(brain) as server:
        cfg = {"model": model(server), "modes": ["single_tool"], "requests_per_mode": 4, "k": 1}
        cfg |= {"sampling": "list", "servers": ["calculator"]}
        calls = stage(run, "synth.tasks", cfg)["usage"]["calls"]  # the answers cached
    gone = cfg | {"model": model(server) | {"base_url": dead, "max_retries": 0}}
    with pytest.raises(UserError, match=r"^shard [01] on node .* model calls failed \(scripted at http"):
        run_command("synth.tasks", run, gone, fresh=True, world_size=2, executor="ray", address=ray_cluster)
    again = run_command(
        "synth.tasks", run, gone, fresh=True, reuse_cache=True, world_size=2, executor="ray", address=ray_cluster
    )
    assert calls == 4 and sum(m["usage"]["cached_calls"] for m in again["shards"]) == calls


def test_a_pipeline_of_a_dotted_path_stage_runs_on_ray(tmp_path, ray_cluster):
    """Shards get the StageSpec itself, so a stage named by a dotted path (no registry kind) runs on nodes too."""
    from trajkit.pipeline import run_pipeline

    pipeline = tmp_path / "p.yaml"
    pipeline.write_text("stages:\n  - stage: tests.toy_stage:TOY\n    config: {n: 20}\n")
    manifests = run_pipeline(pipeline, tmp_path / "run", executor="ray", address=ray_cluster, world_size=2)
    assert [m["rank"] for m in manifests] == [0, 1] and sum(m["counts"]["rows.tasks"] for m in manifests) == 20
    assert Store(tmp_path / "run").count("tasks") == 20


def test_a_shard_sizes_its_sandbox_from_its_cpus_and_fails_with_the_reason(tmp_path, ray_cluster):
    """9 sandbox workers fit a machine of 2 CPUs (8 per CPU) but not a shard Ray gave 1 CPU: the shard fails
    before any row, naming itself, its node and the limit of its share."""
    from tests.curate.helpers import run

    store = Store(tmp_path / "run", create=True)
    run(store, "curate.import", preset="humaneval", limit=2)
    with ScriptedServer(coder) as server:
        cfg = {"model": _model(server), "k": 2, "workers": 9}
        with pytest.raises(UserError, match=r"^shard [01] on node \w{8} \(\S+\): 9 sandbox workers: .* 1 to 8 "):
            run_command("curate.passk", store.root, cfg, world_size=2, executor="ray", address=ray_cluster)
    assert not store.shards("samples")
