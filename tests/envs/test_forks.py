"""Instances of a Python server forked from a zygote: contained, started and ended exactly as spawned ones."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import signal
import socket
import sys
import tempfile

import psutil
import pytest

from tests.envs.test_contain import FILEKV
from tests.envs.test_leaks import children, open_fds
from tests.fixtures.envs import RAW_SERVER
from tests.nonroot import NOBODY, nobody_folder, run_as_nobody
from trajkit.confine.server_zygote import UNFIT
from trajkit.envs import contain, forks
from trajkit.envs.config import ServerConfig
from trajkit.envs.discovery import discover
from trajkit.envs.env import ToolEnv
from trajkit.envs.forks import Zygote, python_entry
from trajkit.envs.session import Connection, ServerFault

WHOAMI = os.path.join(os.path.dirname(__file__), "servers", "whoami.py")


def test_python_modules_and_scripts_qualify_and_nothing_else(monkeypatch):
    def entry(command: str, *args: str) -> list[str] | None:
        return python_entry(ServerConfig(command=command, args=list(args)))

    assert entry("python", "-m", "pkg.server", "--x") == ["-m", "pkg.server", "--x"]
    assert entry("/opt/venv/bin/python3.12", "srv.py", "a") == ["srv.py", "a"]
    assert entry("python", "-u", "-m", "pkg") is None  # interpreter options: spawned
    assert entry("python", "-c", "print(1)") is None
    assert entry("uvx", "mcp-server-time") is None and entry("npx", "-y", "srv") is None
    assert entry("python", "srv.py", "--db", "${SESSION_DIR}/db") is None
    assert python_entry(ServerConfig(command="python", args=["-m", "pkg"], fork=False)) is None
    monkeypatch.setenv(contain.ENV_KEEP, "/runs/env-state")  # --keep-env-state: spawned
    assert entry("python", "-m", "pkg.server") is None


async def _state_run(state, victim, n: int = 2, fork: bool = True) -> list:
    """Two trajectories on a file-backed server through a ToolEnv: what each saw and did."""
    cfg = ServerConfig(command=sys.executable, args=[FILEKV], env={"STATE_FILE": str(state)}, fork=fork)
    rows = await discover({"filekv": cfg})
    seen = []
    async with ToolEnv(rows, config={"filekv": cfg}) as env:
        for i in range(n):
            async with env.episode() as ep:
                await ep.call("filekv", "put", {"key": f"m{i}", "value": "v"})
                seen.append(json.loads((await ep.call("filekv", "dump", {})).text))
                seen.append((await ep.call("filekv", "vandalize", {"path": str(victim)})).text)
                if i == 0:  # (once: filling the cap costs a second)
                    seen.append((await ep.call("filekv", "fill", {"mb": 600})).text)
        fork = env.forks["filekv"]
        seen.append(fork is not None and fork.proc is not None and fork.restarts == 0)
    return seen


async def test_a_forked_instance_is_contained_exactly_like_a_spawned_one(tmp_path):
    state, victim = tmp_path / "state.json", tmp_path / "keep.txt"
    state.write_text('{"host": "1"}')
    victim.write_text("mine")
    before = hashlib.sha256(state.read_bytes()).hexdigest()
    forked = await _state_run(state, victim)
    spawned = await _state_run(state, victim, fork=False)
    assert forked[:-1] == spawned[:-1] and forked[-1] is True and spawned[-1] is False
    assert forked[0] == {"host": "1", "m0": "v"} and forked[2] == "error: No space left on device"
    assert [forked[i] for i in (0, 3)] == [{"host": "1", f"m{i}": "v"} for i in range(2)]  # none saw another's
    assert hashlib.sha256(state.read_bytes()).hexdigest() == before and victim.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt", "state.json"]


@pytest.mark.parametrize("args", [[WHOAMI, "--flag"], ["-m", "tests.envs.servers.whoami", "--flag"]])
async def test_the_server_runs_as_main_with_its_own_argv_and_path(args):
    """A server with an ``if __name__ == "__main__"`` block, as a script and as ``-m``: forked, it sees the
    argv, ``__main__`` and ``sys.path[0]`` a spawned one sees, and module state of its own (the module's body ran
    once, in the zygote; only the ``__main__`` block runs in the instance)."""
    cfg = ServerConfig(command=sys.executable, args=args)
    spawned = Connection("whoami", cfg)
    try:
        expected = json.loads((await spawned.call("whoami", {})).text)
    finally:
        await spawned.aclose()
    rows = await discover({"whoami": cfg})
    async with ToolEnv(rows, config={"whoami": cfg}) as env:
        for _ in range(2):
            async with env.episode() as ep:
                assert json.loads((await ep.call("whoami", "whoami", {})).text) == {**expected, "born_here": False}
        assert psutil.Process(env.forks["whoami"].proc.pid).is_running()
    assert expected["argv"][1:] == ["--flag"] and expected["main"][0] == "__main__" and expected["calls"] == 1
    assert expected["born_here"] is True


async def test_a_killed_zygote_is_restarted_then_given_up_for_spawning_with_a_reason(caplog):
    config = {"fresh": ServerConfig(command=sys.executable, args=[str(RAW_SERVER), "--no-readonly"])}
    rows = await discover(config)
    before, fds = children(), open_fds()
    caplog.set_level(logging.WARNING, logger="trajkit.envs.forks")
    async with ToolEnv(rows, config=config) as env:
        for _ in range(forks.MAX_RESTARTS + 1):
            async with env.episode() as ep:
                assert (await ep.call("fresh", "count", {})).text == "1"
                env.forks["fresh"].proc.send_signal(signal.SIGKILL)  # its instance goes with it, with a reason
                with pytest.raises(ServerFault, match="exited during sleep .*the fork server exited"):
                    await ep.call("fresh", "sleep", {"seconds": 10})
        async with env.episode() as ep:  # spawned from now on
            assert (await ep.call("fresh", "count", {})).text == "1"
            assert env.forks["fresh"].gone == "exited with status -9" and env.forks["fresh"].proc is None
        controls = [env.forks["fresh"]._control]
    reasons = [r.getMessage() for r in caplog.records]
    again = "fork server of 'fresh' exited with status -9; started again"
    assert reasons == [again] * forks.MAX_RESTARTS + [
        again.replace("started again", "its instances are spawned from now on")
    ]
    assert children() <= before and open_fds() <= fds and controls == [None]


async def test_no_zygote_or_instance_outlives_the_env_and_a_dead_zygote_means_a_spawn(tmp_path):
    config = {"fresh": ServerConfig(command=sys.executable, args=[str(RAW_SERVER), "--no-readonly"])}
    rows = await discover(config)
    before = children()
    async with ToolEnv(rows, config=config, warm=3) as env:
        async with env.episode() as ep:
            assert (await ep.call("fresh", "count", {})).text == "1"
            fork: Zygote = env.forks["fresh"]
            family = psutil.Process(fork.proc.pid).children(recursive=True)
            assert len(family) >= 3 * 2  # instances forked (launcher, pid 1, server each), warm ones included
        fork.proc.kill()  # the warm instances die with it, and are replaced
        fork.proc.wait()
        fork.proc.poll = lambda: None  # dead after the check: the stand-in finds nobody listening, and spawns
        seen = []
        for _ in range(6):  # warm instances forked before the kill fault (with the reason) when used; the rest spawn
            async with env.episode() as ep:
                try:
                    seen.append((await ep.call("fresh", "count", {})).text)
                except ServerFault as e:
                    seen.append("fork server exited" in str(e))
        assert set(seen) <= {True, "1"} and seen.count(True) <= 3 and seen[-3:] == ["1"] * 3
    assert children() <= before and fork._control is None
    assert not [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


SCRIBBLER = """
import os, sys
import scribble  # writes when imported: read-only in the zygote, so each instance imports it in its overlays
from mcp.server import MCPServer

server = MCPServer("scribbler", version="1.0", log_level="WARNING")


@server.tool()
def marks() -> str:
    \"\"\"The marks file as this instance sees it.\"\"\"
    with open(os.environ["MARKS"]) as f:
        return f.read()


if __name__ == "__main__":
    server.run()
"""


async def test_what_the_zygotes_imports_write_reaches_neither_the_host_nor_another_instance(tmp_path):
    (tmp_path / "scribble.py").write_text('import os\nwith open(os.environ["MARKS"], "a") as f:\n    f.write("x")\n')
    (tmp_path / "srv.py").write_text(SCRIBBLER)
    marks = tmp_path / "marks.txt"
    cfg = ServerConfig(command=sys.executable, args=[str(tmp_path / "srv.py")], env={"MARKS": str(marks)})
    rows = await discover({"s": cfg})
    assert rows[0]["status"] == "ok", rows[0]["reason"]
    async with ToolEnv(rows, config={"s": cfg}) as env:
        for _ in range(2):
            async with env.episode() as ep:
                assert (await ep.call("s", "marks", {})).text == "x"  # its own import's write, nobody else's
        assert env.forks["s"].proc is not None
    assert not marks.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["scribble.py", "srv.py"]


LATE = """
import importlib, sys
from mcp.server import MCPServer

server = MCPServer("late", version="1.0", log_level="WARNING")
SEEN = {}


@server.tool()
def preloaded() -> str:
    \"\"\"Whether latemod was loaded before this server's __main__ block imported it.\"\"\"
    return str(SEEN["late"])


if __name__ == "__main__":
    SEEN["late"] = "latemod" in sys.modules
    importlib.import_module("latemod")  # what a server imports only once it runs
    server.run()
"""
THREAD = "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"


@pytest.mark.parametrize("mode", ["late", "late thread", "thread at import"])
async def test_what_a_server_imports_once_it_runs_is_imported_by_the_zygote_and_threads_are_never_forked(
    tmp_path, caplog, mode
):
    """The zygote's rehearsal start finds the modules a server imports only once it runs, and imports them for
    every instance. A module whose import starts a thread makes a process unfit to fork (a fork carries one
    thread): found by the rehearsal, the zygote starts again without it, silently, and its instances import it
    themselves; imported by the server's own body, its instances are spawned (a warning says why)."""
    (tmp_path / "latemod.py").write_text("x = 1\n" if mode == "late" else THREAD)
    entry = (
        LATE if mode != "thread at import" else LATE.replace("import importlib, sys", "import importlib, sys, latemod")
    )
    (tmp_path / "late.py").write_text(entry)
    cfg = ServerConfig(command=sys.executable, args=[str(tmp_path / "late.py")])
    rows = await discover({"late": cfg})
    caplog.set_level(logging.WARNING, logger="trajkit.envs.forks")
    async with ToolEnv(rows, config={"late": cfg}) as env:
        for _ in range(2):  # (the first start fails for the threads: spawned; the second after the reason)
            async with env.episode() as ep:
                assert (await ep.call("late", "preloaded", {})).text == str(mode != "late thread")
        fork = env.forks["late"]
    if mode == "thread at import":
        assert fork.gone.startswith("exited with status 75 (stderr: trajkit: a module this server imports starts")
        assert [r.getMessage().endswith("its instances are spawned from now on") for r in caplog.records] == [True]
    else:
        assert fork.gone is None and fork.restarts == 0 and fork.rehearse is (mode == "late") and not caplog.records


NOBODY_FORKS = """
import asyncio, json, os, sys
from trajkit.envs.config import ServerConfig
from trajkit.envs.env import ToolEnv


async def main() -> dict:
    cfg = ServerConfig(command=sys.executable, args=[FILEKV], env={"STATE_FILE": os.path.abspath("data/state.json")})
    found = {}
    async with ToolEnv([ROW], config={"filekv": cfg}) as env:
        for i in range(2):
            async with env.episode() as ep:
                found[f"put{i}"] = (await ep.call("filekv", "put", {"key": f"m{i}", "value": "v"})).text
                found[f"dump{i}"] = json.loads((await ep.call("filekv", "dump", {})).text)
        found["forked"] = env.forks["filekv"].restarts == 0 and env.forks["filekv"].proc.poll() is None
    return found


print(json.dumps(asyncio.run(main())))
"""


async def test_a_non_root_run_forks_contained_instances_through_nested_user_namespaces():
    cfg = ServerConfig(command=sys.executable, args=[FILEKV])
    row = (await discover({"filekv": cfg}))[0]
    with nobody_folder() as folder:
        data = folder / "data"
        data.mkdir()
        (data / "state.json").write_text('{"host": "1"}')
        for path in (data, data / "state.json"):
            os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid)
        done = run_as_nobody(f"FILEKV = {FILEKV!r}\nROW = {row!r}\n{NOBODY_FORKS}", folder)
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout.splitlines()[-1])
        assert found == {
            "put0": "ok",
            "put1": "ok",
            "dump0": {"host": "1", "m0": "v"},
            "dump1": {"host": "1", "m1": "v"},
            "forked": True,
        }
        assert (data / "state.json").read_text() == '{"host": "1"}' and os.listdir(data) == ["state.json"]


DAEMON = """
import subprocess, sys
from mcp.server import MCPServer

# at import (so in the zygote), in a session of its own: out of reach of a kill of the zygote's process group
CHILD = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "MARKER"], start_new_session=True)
server = MCPServer("daemon", version="1.0", log_level="WARNING")


@server.tool()
def ping() -> str:
    \"\"\"pong\"\"\"
    return "pong"


if __name__ == "__main__":
    server.run()
"""


async def test_a_server_whose_body_starts_a_process_is_spawned_and_the_process_dies_with_the_zygote(tmp_path):
    """A process the server's body leaves running in the zygote (even one that left its session) would live as
    long as the env, beside every trajectory's instances: the zygote exits (PID 1 of a namespace of its own, it
    takes the process with it) and the server's instances are spawned, each with its own."""
    marker = f"trajkit-zygote-child-{os.getpid()}"
    script = tmp_path / "daemon.py"
    script.write_text(DAEMON.replace("MARKER", marker))
    config = {"daemon": ServerConfig(command=sys.executable, args=[str(script)])}
    rows = await discover(config)

    def started() -> list[psutil.Process]:
        return [p for p in psutil.process_iter(["cmdline"]) if marker in (p.info["cmdline"] or [])]

    async with ToolEnv(rows, config=config) as env:
        async with env.episode() as ep:
            assert (await ep.call("daemon", "ping", {})).text == "pong"
            alive = started()
            assert len(alive) == 1  # the spawned instance's own (the zygote's is gone)
        fork = env.forks["daemon"]  # (gone, it is found so at the next start)
        assert fork.proc.wait(timeout=10) == UNFIT and "trajkit: this server starts a process" in fork._log.tail()
    _, left = psutil.wait_procs(alive, timeout=10)
    assert not left and not started()


NETWORK_AT_IMPORT = """
import os, socket
from mcp.server import MCPServer

try:  # at import (so in the zygote): a connection every instance would inherit
    KEPT = socket.create_connection(("127.0.0.1", int(os.environ["PORT"])), timeout=5)
    SEEN = "connected"
except OSError as e:
    SEEN = type(e).__name__
server = MCPServer("net", version="1.0", log_level="WARNING")


@server.tool()
def seen() -> str:
    \"\"\"What the module body's connection attempt did.\"\"\"
    return SEEN


if __name__ == "__main__":
    server.run()
"""


async def test_a_server_without_network_has_none_in_its_zygote_either(tmp_path):
    """The server's body runs in the zygote: for a ``network: false`` server it must find no network there, as a
    spawned instance finds none (it reached a loopback listener, and every instance inherited the connection)."""
    (tmp_path / "net.py").write_text(NETWORK_AT_IMPORT)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        env = {"PORT": str(listener.getsockname()[1])}
        cfg = ServerConfig(command=sys.executable, args=[str(tmp_path / "net.py")], env=env, network=False)
        rows = await discover({"net": cfg})
        async with ToolEnv(rows, config={"net": cfg}) as env:
            async with env.episode() as ep:
                assert (await ep.call("net", "seen", {})).text == "OSError"
            assert env.forks["net"].proc is not None


async def test_a_zygote_that_never_answers_is_killed_and_the_instance_spawned(caplog):
    """A zygote alive but wedged (a server's body can do it: a signal handler that never returns) must not hold a
    start forever: nothing, not even cancelling the episode, ended the wait for its answer."""
    cfg = ServerConfig(command=sys.executable, args=[str(RAW_SERVER)])
    fork = Zygote("raw", cfg)
    try:
        first = Connection("raw", cfg, fork=fork, startup_timeout_s=2)
        assert (await first.call("pid", {})).text
        await first.aclose()
        zygote = psutil.Process(fork.proc.pid).children()[0]
        zygote.suspend()
        second = Connection("raw", cfg, fork=fork, startup_timeout_s=2)
        try:
            async with asyncio.timeout(30):
                assert (await second.call("echo", {"text": "spawned"})).text == "spawned"
        finally:
            await asyncio.wait_for(second.aclose(), 10)
        assert fork.proc.wait(10) == -signal.SIGKILL
        with contextlib.suppress(psutil.NoSuchProcess):
            assert zygote.wait(10) is None or zygote.status() == psutil.STATUS_ZOMBIE
        assert [r.getMessage() for r in caplog.records] == ["fork server of 'raw' did not answer in 2s; killed"]
    finally:
        fork.close()


REMOUNTER = """
import ctypes, os
from mcp.server import MCPServer

# at import, so in the zygote, with its capabilities: the host remounted writable, a host file written
with open("/proc/self/mountinfo") as f:
    points = [line.split()[4] for line in f]
point = max((p for p in points if os.environ["VICTIM"].startswith(p.rstrip("/") + "/")), key=len)
ctypes.CDLL(None).mount(None, point.encode(), None, 0x20 | 0x1000, None)  # MS_REMOUNT | MS_BIND, read-write
try:
    with open(os.environ["VICTIM"], "w") as f:
        f.write("x")
except OSError as e:
    SEEN = e.strerror
server = MCPServer("remounter", version="1.0", log_level="WARNING")


@server.tool()
def seen() -> str:
    \"\"\"What the body's write met.\"\"\"
    return SEEN


if __name__ == "__main__":
    server.run()
"""


async def test_the_servers_body_cannot_remount_the_host_writable_in_the_zygote(tmp_path):
    """The zygote keeps the capabilities its instances' containment needs, and runs the server's body: its
    read-only mounts are locked (a user namespace's copy), so the body cannot undo them (it wrote a host file)."""
    (tmp_path / "remounter.py").write_text(REMOUNTER)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.dirname(__file__))) as folder:  # not overlaid
        victim = os.path.join(folder, "victim.txt")
        cfg = ServerConfig(command=sys.executable, args=[str(tmp_path / "remounter.py")], env={"VICTIM": victim})
        rows = await discover({"r": cfg})
        async with ToolEnv(rows, config={"r": cfg}) as env:
            async with env.episode() as ep:
                assert (await ep.call("r", "seen", {})).text == "Read-only file system"
            assert env.forks["r"].proc is not None
        assert os.listdir(folder) == []
