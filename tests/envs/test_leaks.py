"""No server process and no file descriptor outlives its sessions: dozens of them, faults, and Ctrl-C."""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.fixtures.envs import RAW_SERVER
from trajkit.envs.discovery import discover
from trajkit.envs.env import ToolEnv
from trajkit.envs.session import ServerFault


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


async def test_many_sessions_leave_no_process_or_fd_behind(raw_server):
    config = {"fresh": raw_server("--no-readonly"), "shared": raw_server()}
    rows = await discover(config)
    before = children()

    async def run(n: int) -> list[str]:
        async with ToolEnv(rows, config=config, max_processes=12, pool_size=2) as env:

            async def one(i: int) -> str:
                async with env.episode() as ep:
                    tool = "crash" if i % 10 == 3 else "hang" if i % 40 == 7 else "echo"
                    with contextlib.suppress(ServerFault):
                        await ep.call("fresh", tool, {"text": "x"}, timeout_s=0.3)
                    return (await ep.call("shared", "pid", {})).text

            return await asyncio.gather(*(one(i) for i in range(n)))

    await run(4)  # warm up the loop's own descriptors (selector, thread pool)
    fds = open_fds()
    pool_pids = await run(60)  # 60 fresh processes, 6 of them crashed and 2 hung: a leak per session would show
    assert len(set(pool_pids)) <= 2  # the stateless server was pooled
    assert children() <= before
    assert open_fds() <= fds


def test_ctrl_c_shuts_every_server_down(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "interrupt_run.py"), str(RAW_SERVER)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "TRAJKIT_UNCONTAINED": "1"},  # the servers report host pids (contained, each is pid 2)
    )
    pids: set[int] = set()
    for _ in range(4):
        line = proc.stdout.readline()
        assert line.startswith("pids "), proc.stderr.read() if proc.poll() is not None else line
        pids.update(int(p) for p in line.split()[1:])
    assert len(pids) == 5 and all(psutil.pid_exists(p) for p in pids)  # 4 fresh + 1 pooled
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:  # where it hangs, in the failure
        proc.send_signal(signal.SIGUSR1)
        time.sleep(1)
        proc.kill()
        raise AssertionError(f"still running 30 s after SIGINT: {proc.communicate()[1][-6000:]}") from None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    assert not [p for p in pids if _alive(p)]


def test_a_killed_client_takes_its_contained_servers_with_it(tmp_path):
    """SIGKILL gives no chance to shut anything down (a Ray worker killed mid-shard): the servers' launchers and
    the fork server die with their parent, and with each its namespace, even servers that ignore their closed
    stdin; and neither the client's temporary folder nor the cgroups keep anything of theirs."""
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "interrupt_run.py"), str(RAW_SERVER), "--linger"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    for _ in range(4):
        line = proc.stdout.readline()
        assert line.startswith("pids "), proc.stderr.read() if proc.poll() is not None else line
    started = psutil.Process(proc.pid).children(recursive=True)
    lines = [" ".join(_cmdline(p)) for p in started]
    assert sum("--linger" in line for line in lines) >= 5  # launchers and servers, 4 fresh + 1 pooled
    assert any(" server_zygote serve " in line for line in lines)  # (the fresh ones forked)
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p.pid) for p in started):
        time.sleep(0.05)
    assert not [p.pid for p in started if _alive(p.pid)]
    assert [n for n in os.listdir(tmp_path) if not n.startswith("trajkit-confine-")] == []  # (what the jail
    # starts from stays: one folder per user and install, start.folder)
    pids = {str(p.pid) for p in started}  # (a launcher's cgroup is named after it, a forked instance's too)
    cgroups = glob.glob("/sys/fs/cgroup/**/trajkit-*-env-0", recursive=True)
    assert not [c for c in cgroups if c.split("-")[-3] in pids]


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:  # (gone, or a zombie by now)
        return []


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
