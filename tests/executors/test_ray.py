"""The Ray executor on a real two-node cluster: the same tables as the local executor, shards spread
over the nodes, per-rank manifests as with ranks run by hand."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.curate.test_passk import K, _model, coder
from tests.synth.compare import assert_same_output
from tests.synth.conftest import model, pipeline_configs, stage, with_servers
from trajkit.clikit import run_command
from trajkit.errors import UserError
from trajkit.models.scripted_server import ScriptedServer
from trajkit.store import Store

TIMINGS = {"runtime_s", "model_s", "tools_s", "total_s"}


def test_rollouts_on_ray_equal_local(tmp_path, ray_cluster, calculator_rows, model_server):
    base = with_servers(tmp_path / "base", calculator_rows)
    cfgs = pipeline_configs(model_server)
    stage(base, "synth.tasks", cfgs["tasks"])
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    shutil.copytree(base, local)
    shutil.copytree(base, on_ray)
    rollouts = {"model": model(model_server), "pool_size": 1, "concurrency": 4}
    stage(local, "synth.rollouts", rollouts)
    manifests = run_command("synth.rollouts", on_ray, {**rollouts}, world_size=2, executor="ray", address=ray_cluster)
    assert [m["rank"] for m in manifests] == [0, 1] and all(m["counts"] for m in manifests)
    assert len({m["node"] for m in manifests}) >= 1
    assert [Store(on_ray).manifest("rollouts", r, 2)["rank"] for r in (0, 1)] == [0, 1]
    assert_same_output(local, on_ray, "rollouts")
    # a rerun finds every shard complete and writes nothing
    again = run_command("synth.rollouts", on_ray, {**rollouts}, world_size=2, executor="ray", address=ray_cluster)
    assert [m["finished_at"] for m in again] == [m["finished_at"] for m in manifests]


def test_passk_on_ray_equal_local(tmp_path, ray_cluster):
    from tests.curate.helpers import run

    local, on_ray = Store(tmp_path / "local", create=True), Store(tmp_path / "ray", create=True)
    for s in (local, on_ray):
        run(s, "curate.import", preset="humaneval", limit=2)
    with ScriptedServer(coder) as server:
        cfg = {"model": _model(server), "k": K, "max_tokens": 512, "concurrency": 2}
        run(local, "curate.passk", **cfg)
        run_command("curate.passk", on_ray.root, cfg, world_size=2, executor="ray", address=ray_cluster)
    for table, key in (("samples", "sample_id"), ("passk", "task_id")):
        a = {r[key]: {k: v for k, v in r.items() if k not in TIMINGS} for r in local.rows(table, stage="passk")}
        b = {r[key]: {k: v for k, v in r.items() if k not in TIMINGS} for r in on_ray.rows(table, stage="passk")}
        assert a and a.keys() == b.keys() and a == b
    assert (
        local.sql("SELECT task_id, difficulty FROM tasks ORDER BY 1").to_pylist()
        == on_ray.sql("SELECT task_id, difficulty FROM tasks ORDER BY 1").to_pylist()
    )


def test_a_worker_killed_mid_shard_is_retried_without_loss_or_duplicates(tmp_path, ray_cluster, calculator_rows, brain):
    import psutil

    base = with_servers(tmp_path / "base", calculator_rows)
    with ScriptedServer(brain, delay_s=0.05) as slow:
        stage(base, "synth.tasks", pipeline_configs(slow)["tasks"])
        local, on_ray = tmp_path / "local", tmp_path / "ray"
        shutil.copytree(base, local)
        shutil.copytree(base, on_ray)
        rollouts = {"model": model(slow, cache=False), "pool_size": 1, "concurrency": 1}
        stage(local, "synth.rollouts", rollouts)
        killed: list[int] = []

        def kill_one_shard() -> None:
            deadline = time.monotonic() + 30
            while not killed and time.monotonic() < deadline:
                for p in psutil.process_iter(["pid", "cmdline"]):
                    if "ray::_shard" in " ".join(p.info["cmdline"] or []):
                        time.sleep(0.5)  # mid-shard: some episodes done, others in flight
                        os.kill(p.info["pid"], signal.SIGKILL)
                        killed.append(p.info["pid"])
                        return
                time.sleep(0.05)

        killer = threading.Thread(target=kill_one_shard)
        killer.start()
        run_command("synth.rollouts", on_ray, rollouts, world_size=2, executor="ray", address=ray_cluster)
        killer.join()
    assert killed and not psutil.pid_exists(killed[0])
    assert_same_output(local, on_ray, "rollouts")


def test_without_ray_the_executor_fails_with_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(UserError, match=r"^--executor ray needs Ray: pip install 'trajkit\[ray\]'$"):
        run_command("synth.rollouts", tmp_path, {"model": {"model": "m"}}, world_size=2, executor="ray")


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
        deadline = time.monotonic() + 30
        while shards() and time.monotonic() < deadline:  # Ray ends the dead driver's job and its tasks
            time.sleep(0.1)
        assert not shards()
        assert Store(on_ray).manifest("rollouts", 0, 2) is None or Store(on_ray).manifest("rollouts", 1, 2) is None
        run_command("synth.rollouts", on_ray, rollouts, world_size=2, executor="ray", address=ray_cluster)
    assert_same_output(local, on_ray, "rollouts")
