"""A real Ray cluster on loopback for the executor tests: a head node and a worker node, one CPU each,
started once per module with the ``ray`` command and stopped after it."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from trajkit.envs.config import ServerConfig
from trajkit.executors.ray import remove_session

RAY = str(Path(sys.executable).with_name("ray"))
NODE = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--object-store-memory=100000000", "--disable-usage-stats"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(port: str) -> None:
    """Stop this cluster's processes and theirs, found by its port (``ray stop`` would stop every Ray cluster
    of the machine's user, another test run's or a benchmark's included), and delete its session folders."""
    import psutil

    ours = re.compile(rf"--gcs[-_]address=\S+:{port}\b|--gcs_server_port={port}\b")  # nodes name the head's port
    mine, sessions = [], set()
    for p in psutil.process_iter(["cmdline"]):
        line = " ".join(p.info["cmdline"] or [])
        if ours.search(line):
            sessions.update(re.findall(r"--session_dir=(\S+)", line))  # a raylet's
            with contextlib.suppress(psutil.Error):
                mine += [p, *p.children(recursive=True)]
    for p in mine:  # as ray stop --force does: a test cluster has nothing to save (SIGTERM cost 15 s a module)
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(mine, timeout=15)
    for session in sessions:
        remove_session(Path(session))


@pytest.fixture(scope="module")
def ray_cluster() -> str:
    """The address of a two-node Ray cluster (head + worker) on 127.0.0.1."""
    address = f"127.0.0.1:{_free_port()}"
    port = address.split(":")[1]
    # loopback only, and the same mode for nodes and drivers whatever ~/.ray holds (Ray 2.60 turns token
    # authentication on for a cluster when it finds a token there)
    saved = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    try:
        subprocess.run(
            [RAY, "start", "--head", f"--port={port}", "--include-dashboard=false", *NODE],
            check=True,
            capture_output=True,
            timeout=120,
        )
        subprocess.run([RAY, "start", f"--address={address}", *NODE], check=True, capture_output=True, timeout=120)
        yield address
    finally:
        _stop(port)
        if saved is None:
            del os.environ["RAY_AUTH_MODE"]
        else:
            os.environ["RAY_AUTH_MODE"] = saved


@pytest.fixture(scope="module")
def stdio_rows() -> list[dict]:
    """The example calculator harvested as a stdio server: each shard starts its own process of it."""
    import asyncio

    from trajkit.envs.discovery import discover

    cfg = ServerConfig(command=sys.executable, args=["-m", "trajkit.envs.servers.calculator"])
    rows = asyncio.run(discover({"calculator": cfg}))
    assert [r["status"] for r in rows] == ["ok"], rows[0]["reason"]
    return rows
