"""Containment of stdio servers: each trajectory's writes stay its own, the host is untouched."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys

from trajkit.envs.config import ServerConfig
from trajkit.envs.contain import writable_paths
from trajkit.envs.session import Connection

FILEKV = os.path.join(os.path.dirname(__file__), "servers", "filekv.py")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_writable_paths_cover_args_env_cwd_home_and_tmp():
    args = ["--db", "/etc/hosts", "plain", "/usr/share/no-such-dir/state.json", "/proc/self/x", "/"]
    paths = writable_paths(args, {"CERTS": "/etc/ssl", "N": "3"}, "/var/log", "/root")
    assert paths == ["/etc", "/tmp", "/root", "/var/log", "/usr/share"]


async def test_writes_stay_inside_each_trajectory_and_the_host_is_untouched(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    state = folder / "state.json"
    state.write_text('{"host": "1"}')
    victim = folder / "keep.txt"
    victim.write_text("mine")
    before = hashlib.sha256(state.read_bytes()).hexdigest()
    cfg = ServerConfig(command=sys.executable, args=[FILEKV], env={"STATE_FILE": str(state)})
    fds = len(os.listdir("/proc/self/fd"))
    daemons = []
    for round_ in range(2):
        conns = [Connection(f"filekv{i}", cfg) for i in range(3)]
        try:
            await asyncio.gather(*(c.open() for c in conns))
            await asyncio.gather(*(c.call("put", {"key": f"m{round_}-{i}", "value": "v"}) for i, c in enumerate(conns)))
            for i, c in enumerate(conns):
                seen = json.loads((await c.call("dump", {})).text)
                assert seen == {"host": "1", f"m{round_}-{i}": "v"}  # its own marker, nobody else's
            assert (await conns[0].call("vandalize", {"path": str(victim)})).text == "done"
            assert (await conns[1].call("fill", {"mb": 600})).text.startswith("error: No space left")
            daemons.append(int((await conns[2].call("daemon", {})).text))
        finally:
            await asyncio.gather(*(c.aclose() for c in conns))
    assert hashlib.sha256(state.read_bytes()).hexdigest() == before
    assert victim.read_text() == "mine" and not (folder / "keep.txt.new").exists()
    assert not os.path.exists("/tmp/fill.bin")
    await asyncio.sleep(0.2)
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _alive(int(p)) and _cmd(int(p)).endswith("filekv.py")]
    assert len(os.listdir("/proc/self/fd")) <= fds
    assert len(daemons) == 2


def _cmd(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""
