"""Fixtures of the synth tests: a scripted model on loopback, run directories with harvested servers,
and one clean run of every synth stage that other tests compare against."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.synth.brain import Brain
from trajkit.config import build
from trajkit.models.scripted_server import ScriptedServer
from trajkit.runner import run_stage
from trajkit.stages import get_stage
from trajkit.store import Store

STAGES = ("tasks", "rollouts", "judge", "filter", "extend")


def model(server: ScriptedServer, **extra: Any) -> dict[str, Any]:
    """A ModelSpec (as config) for the scripted server: few quick retries, so faults cost little time."""
    return {
        "model": "scripted",
        "backend": "openai",
        "base_url": server.base_url,
        "max_retries": 1,
        "retry_backoff_s": 0.01,
        "timeout_s": 10,
        **extra,
    }


def pipeline_configs(server: ScriptedServer) -> dict[str, dict[str, Any]]:
    """The config of every stage in the shared pipeline (calculator tasks, so rollouts share one server
    process; a custom rollout function and a custom filter, the extension points)."""
    m = model(server)
    return {
        "tasks": {
            "model": m,
            "modes": ["single_tool", "multi_tool"],
            "sampling": "list",
            "servers": ["calculator"],
            "requests_per_mode": 4,
            "k": 3,
            "method": "vs_standard",
        },
        "rollouts": {
            "model": m,
            "pool_size": 1,
            "concurrency": 4,
            "rollout_fn": "tests.synth.extensions:tagged_rollout",
        },
        "judge": {"model": m},
        "filter": {"custom": ["tests.synth.extensions:hold_filter"]},
        "extend": {"model": m, "pool_size": 1, "rounds": 2},
    }


def stage(run_dir: Path, kind: str, config: dict[str, Any], name: str | None = None, **kw: Any) -> dict[str, Any]:
    """Run one stage in-process, quietly; returns its manifest."""
    spec = get_stage(kind)
    return run_stage(Store(run_dir, create=True), spec, build(spec.config, config), name=name, quiet=True, **kw)


def with_servers(run_dir: Path, rows: list[dict[str, Any]]) -> Path:
    """A run directory holding a harvested ``servers`` table."""
    Store(run_dir, create=True).write("servers", "harvest", rows)
    return run_dir


@pytest.fixture(scope="session")
def brain() -> Brain:
    return Brain(garbage=0.25)


@pytest.fixture(scope="session")
def model_server(brain):
    with ScriptedServer(brain) as server:
        yield server


def _stable_port(first: int = 38_417) -> int:
    """The first free loopback port from a fixed one: the server's url, and so its id and every id
    and scripted answer derived from it, stay the same from session to session."""
    for port in range(first, first + 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


@pytest.fixture(scope="session")
def calculator_rows():
    """The example calculator, harvested: one process serving streamable HTTP on loopback for the
    whole session (it is stateless), so the stages' episodes share it instead of each starting one."""
    from trajkit.envs.config import ServerConfig
    from trajkit.envs.discovery import discover

    port = _stable_port()
    cmd = [sys.executable, "-m", "trajkit.envs.servers.calculator", "--http", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        rows = asyncio.run(discover({"calculator": ServerConfig(url=f"http://127.0.0.1:{port}/mcp")}))
        assert [r["status"] for r in rows] == ["ok"], rows[0]["reason"]
        yield rows
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def synth_run(tmp_path, calculator_rows) -> Path:
    """An empty run with the calculator harvested."""
    return with_servers(tmp_path / "run", calculator_rows)


@pytest.fixture(scope="session")
def clean_pipeline(tmp_path_factory, calculator_rows, model_server) -> Path:
    """Every synth stage run once, uninterrupted, on one shard."""
    run = with_servers(tmp_path_factory.mktemp("clean") / "run", calculator_rows)
    for name, cfg in pipeline_configs(model_server).items():
        stage(run, f"synth.{name}", cfg)
    return run
