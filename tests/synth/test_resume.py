"""Every synth stage, killed with SIGKILL mid-run and run again, ends with the rows of an uninterrupted run.

Each stage starts from a copy of the clean run holding only what comes before
it; its CLI runs in a subprocess (all five at once) and is killed once its
first shard is on disk; the rerun resumes in-process with the same config (the
CLI builds the same config object). Each stage has its own scripted model,
which holds its answers after the first few (the filter stage's custom filter
holds instead), so the kill always lands after some rows were written and
before the stage finished.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.fixtures.synth import STAGES, pipeline_configs, stage
from tests.synth.brain import Brain
from tests.synth.compare import OUTPUTS, assert_same_output, stage_rows
from trajkit.models.scripted_server import ScriptedServer
from trajkit.store import Store

ROOT = Path(__file__).resolve().parents[2]
TRAJKIT = Path(sys.executable).parent / "trajkit"
# model answers let through before holding: enough for at least one row to be written
ALLOW = {"tasks": 1, "rollouts": 2, "judge": 1, "filter": 0, "extend": 3}
FIRST_TABLE = {
    "tasks": "tasks",
    "rollouts": "trajectories",
    "judge": "task_quality",
    "filter": "rejected",
    "extend": "trajectories",
}


def _upstream_of(clean: Path, name: str, dst: Path) -> Path:
    """A copy of the clean run without ``name`` and the stages after it (and without the call cache)."""
    shutil.copytree(clean, dst, ignore=shutil.ignore_patterns("_cache"))
    store = Store(dst)
    for later in STAGES[STAGES.index(name) :]:
        store.drop_stage(later)
    return dst


def _wait_for_shard(run: Path, table: str, name: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if Store(run).shards(table, name):
            return
        assert proc.poll() is None, f"stage {name} ended before it could be killed: {proc.stderr.read()}"
        time.sleep(0.02)
    raise AssertionError(f"stage {name} wrote no shard in {timeout}s")


def test_every_stage_resumes_after_sigkill(tmp_path, clean_pipeline):
    hold = tmp_path / "hold"
    hold.touch()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRAJKIT_TEST_HOLD": str(hold)}
    servers, runs, procs = {}, {}, {}
    try:
        for name in STAGES:
            brain = Brain(garbage=0.25)
            brain.hold_after(ALLOW[name])
            servers[name] = (ScriptedServer(brain).start(), brain)
            runs[name] = _upstream_of(clean_pipeline, name, tmp_path / name)
            cfg = pipeline_configs(servers[name][0])[name]
            config = tmp_path / f"{name}.yaml"
            config.write_text(yaml.safe_dump(cfg))
            cmd = [
                str(TRAJKIT),
                "synth",
                name,
                "--run",
                str(runs[name]),
                "--config",
                str(config),
                "--set",
                "flush_rows=1",
            ]
            cmd += ["--set", "concurrency=1"] if name != "filter" else []
            procs[name] = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
        for name in STAGES:
            _wait_for_shard(runs[name], FIRST_TABLE[name], name, procs[name])
            procs[name].send_signal(signal.SIGKILL)
            procs[name].wait(timeout=30)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        hold.unlink()
        for _, brain in servers.values():
            brain.release()

    try:
        for name in STAGES:
            run, store = runs[name], Store(runs[name])
            assert store.manifest(name) is None, f"{name} finished before the kill"
            partial = {t: len(stage_rows(run, t, name)) for t in OUTPUTS[name]}
            clean = {t: len(stage_rows(clean_pipeline, t, name)) for t in OUTPUTS[name]}
            assert any(partial[t] < clean[t] for t in partial), f"{name}: nothing left to resume"

            stage(run, f"synth.{name}", pipeline_configs(servers[name][0])[name])  # the rerun
            assert_same_output(clean_pipeline, run, name)
            resumed, uninterrupted = store.manifest(name)["counts"], Store(clean_pipeline).manifest(name)["counts"]
            keys = [
                k for k in uninterrupted if k.startswith(("rows.", "rejected.", "status.")) or k.endswith(".unparsed")
            ]
            assert {k: resumed.get(k) for k in keys} == {k: uninterrupted[k] for k in keys}
    finally:
        for server, _ in servers.values():
            server.stop()
