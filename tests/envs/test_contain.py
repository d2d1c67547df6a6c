"""Containment of stdio servers: each trajectory's writes stay its own, the host is untouched."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.envs.servers import kernel
from tests.envs.test_leaks import children, open_fds
from tests.fixtures.envs import RAW_SERVER
from tests.nonroot import NOBODY, nobody_folder, run_as_nobody
from trajkit.cli import _options
from trajkit.envs import contain
from trajkit.envs.config import ServerConfig
from trajkit.envs.contain import writable_paths
from trajkit.envs.discovery import describe_server, discover
from trajkit.envs.env import ToolEnv
from trajkit.envs.session import Connection

FILEKV = os.path.join(os.path.dirname(__file__), "servers", "filekv.py")
CHANNELS = os.path.join(os.path.dirname(__file__), "servers", "channels.py")
CHECKOUT = Path(__file__).resolve().parents[2]


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


def _leftovers() -> set[str]:
    """Memory cgroups of contained instances whose launcher is gone (other runs' live ones aside)."""
    with open("/proc/self/cgroup") as f:
        own = next((line.split(":")[2].strip() for line in f if ":memory:" in line), None)
    parent = f"/sys/fs/cgroup/memory{own}" if own is not None else ""
    found = os.listdir(parent) if os.path.isdir(parent) else []
    return {e for e in found if e.endswith("-env-0") and not os.path.exists(f"/proc/{e.split('-')[1]}")}


async def test_a_server_run_as_root_cannot_remount_the_host_writable_or_leave_its_cgroup():
    """Contained, the server has no capability left even as root: a remount of the host would undo every
    protection (it wrote a host file, spawned or forked); and /sys is read-only to it, nor does it hold its
    cgroup's folders open (as root it moved itself out of its memory cgroup, spawned or forked)."""
    if os.geteuid() != 0:
        return
    cfg = ServerConfig(command=sys.executable, args=[FILEKV])
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.dirname(FILEKV))) as folder:  # not overlaid
        target = {"path": os.path.join(folder, "x")}
        conn = Connection("filekv", cfg)
        try:
            seen = [(await conn.call("remount", target)).text, (await conn.call("leave_cgroup", {})).text]
        finally:
            await conn.aclose()
        async with ToolEnv(await discover({"filekv": cfg}), config={"filekv": cfg}) as env, env.episode() as ep:
            seen += [
                (await ep.call("filekv", "remount", target)).text,
                (await ep.call("filekv", "leave_cgroup", {})).text,
            ]
            assert env.forks["filekv"].proc is not None
        assert seen[::2] == ["remount refused: Operation not permitted"] * 2 and os.listdir(folder) == []
        assert all(os.path.basename(cgroup).startswith("trajkit-") for cgroup in seen[1::2]), seen


KERNEL_CHANNELS = """
import asyncio, json, os, sys
from tests.envs.servers import kernel
from trajkit.envs.config import ServerConfig
from trajkit.envs.forks import Zygote
from trajkit.envs.session import Connection
from trajkit.confine import isolation as iso

if os.geteuid() == 0:  # the host's POSIX message queues at /dev/mqueue, as Docker mounts them (in a mount namespace
    # of this process's own, over a /dev of its own, so that nothing is made in the host's): not for a server to see
    iso.unshare(iso.CLONE_NEWNS)
    iso.mount(None, "/", None, iso.MS_REC | iso.MS_PRIVATE)
    devices = {name: iso.detached_copy(f"/dev/{name}") for name in ("null", "zero", "full", "random", "urandom")}
    iso.mount("tmpfs", "/dev", "tmpfs", iso.MS_NOSUID, "size=1m,mode=0755")
    for name, fd in devices.items():
        open(f"/dev/{name}", "w").close()
        iso.attach(fd, f"/dev/{name}")
    os.symlink("/proc/self/fd", "/dev/fd")
    os.mkdir("/dev/shm", 0o1777)
    os.mkdir("/dev/mqueue")
    iso.mount("mqueue", "/dev/mqueue", "mqueue", 0)
    open("/dev/mqueue/trajkit-channel-200", "w").close()  # the host's own queue


async def plant_then_look(cfg, fork, value):  # one instance plants through every channel, the next one looks
    seen = {}
    for call, arguments in (("plant", {"value": value}), ("look", {})):
        conn = Connection("ch", cfg, fork=fork)
        try:
            seen[call] = json.loads((await conn.call(call, arguments)).text)
        finally:
            await conn.aclose()
    return seen


async def chain(network, value):  # spawned, then forked; a value of its own (the two chains run side by side, and
    # a running instance can see another's lock on a host file: concurrent, not left for the next)
    cfg = ServerConfig(command=sys.executable, args=[CHANNELS], network=network)
    zygote = Zygote("ch", cfg)
    try:
        seen = [await plant_then_look(cfg, fork, value) for fork in (None, zygote)]
        return seen if zygote.proc is not None and zygote.restarts == 0 else "not forked"
    finally:
        zygote.close()


async def main():
    return dict(zip(("on", "off"), await asyncio.gather(chain(True, VALUES["on"]), chain(False, VALUES["off"]))))


seen = asyncio.run(main())
mqueue = sorted(os.listdir("/dev/mqueue")) if os.path.isdir("/dev/mqueue") else None
print(json.dumps({"seen": seen, "mqueue": mqueue}))
"""


def test_nothing_an_instance_leaves_in_the_kernel_reaches_the_next():
    """An instance plants a value through every channel the kernel keeps (``servers/kernel.py``: System V and
    POSIX IPC, the mqueue file system at /dev/mqueue, keyrings, files and file-system metadata, the PID counter, a
    daemon's socket and lock); the next instance of the server, spawned or forked, network on or off, finds none
    of it, and nothing stays on the host. As root, the run has the host's queues at /dev/mqueue (Docker mounts
    them there): an instance sees its own IPC namespace's there instead. With the network on, an instance shares
    the host's network namespace, whose counters it can move (and whose network reaches anything): that channel
    is the host's, and not looked at."""
    values = {"on": kernel.VALUE, "off": kernel.VALUE + 1}
    script = f"CHANNELS, VALUES = {CHANNELS!r}, {values!r}\n{KERNEL_CHANNELS}"
    try:
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=CHECKOUT, check=False
        )
    finally:
        on_host = kernel.look(kernel.STORES)
        kernel.remove()
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    no_mqueue = set() if found["mqueue"] is not None else {"mqueue_fs"}  # (as root there is: the script mounts one)
    for network, chain in found["seen"].items():
        assert chain != "not forked"
        for seen in chain:
            refused = {c: why for c, why in seen["plant"].items() if why != "ok"}
            assert set(refused) == {"keyring", "hostname", *no_mqueue}, seen["plant"]  # every other plant worked
            assert refused["keyring"].startswith("PermissionError")  # the seccomp filter
            leaked = [
                c for c, v in seen["look"].items() if v == values[network] and not (network == "on" and c == "net")
            ]
            assert leaked == [], leaked
    assert found["mqueue"] in (None, ["trajkit-channel-200"])  # the host's own queue, and only it
    assert on_host == dict.fromkeys(kernel.STORES)


async def test_warm_pool_hands_each_trajectory_a_fresh_started_instance_and_reads_its_end_state():
    config = {"own": ServerConfig(command=sys.executable, args=[str(RAW_SERVER), "--no-readonly"])}
    rows = await discover(config)
    async with ToolEnv(rows, config=config, warm=2) as env:
        used, seen = [], []
        for i in range(4):
            if i:  # the pool was topped up while the last trajectory ran: its instances are up by now
                await asyncio.gather(*(c.open() for c in env.warm_pools["own"].ready))
            async with env.episode() as ep:
                conn = ep.fresh["own"]
                assert (conn.session is not None) == (i > 0)  # only the first trajectory waited for a start
                used.append(conn)
                await ep.call("own", "count", {})
                seen.append((await ep.call("own", "count", {})).text)  # end state, read on its own instance
            assert conn.dead == "closed"  # torn down with its trajectory
        assert len({id(c) for c in used}) == 4 and seen == ["2"] * 4  # never used before, never handed out again
        assert len(env.warm_pools["own"].ready) == 2


async def test_stateless_servers_see_the_filesystem_read_only(tmp_path):
    state = tmp_path / "state.json"
    state.write_text("{}")
    cfg = ServerConfig(command=sys.executable, args=[FILEKV], env={"STATE_FILE": str(state)})
    rows = await discover({"filekv": cfg})
    async with ToolEnv(rows, config={"filekv": cfg}, stateless={"filekv": True}, pool_size=1) as env:
        async with env.episode() as ep:
            assert (await ep.call("filekv", "put", {"key": "k", "value": "v"})).is_error
            assert (await ep.call("filekv", "fill", {"mb": 1})).text == "error: Read-only file system"
        async with env.episode() as ep:
            assert (await ep.call("filekv", "dump", {})).text == "{}"  # nothing carried to the next trajectory
    assert state.read_text() == "{}"


async def test_memory_is_capped_and_keep_env_state_keeps_the_writes(monkeypatch, tmp_path):
    monkeypatch.setattr(contain, "MEMORY_MB", 300)
    monkeypatch.setenv(contain.ENV_KEEP, "")  # restored after the test; the flag sets it
    _options(allow_weaker_sandbox=False, keep_env_state=tmp_path / "kept")
    state = tmp_path / "data" / "state.json"
    state.parent.mkdir()
    conn = Connection("filekv", ServerConfig(command=sys.executable, args=[FILEKV], env={"STATE_FILE": str(state)}))
    try:
        assert (await conn.call("hog", {"mb": 50})).text == "allocated"
        assert (await conn.call("hog", {"mb": 600})).text.startswith("failed")
        assert (await conn.call("put", {"key": "k", "value": "v"})).text == "ok"
    finally:
        await conn.aclose()
    assert not state.exists()
    kept = list((tmp_path / "kept").glob("filekv-*/*/upper/**/state.json"))
    assert [json.loads(p.read_text()) for p in kept] == [{"k": "v"}]


async def test_hundreds_of_contained_sessions_leave_no_process_fd_or_mount_behind():
    config = {"fresh": ServerConfig(command=sys.executable, args=[str(RAW_SERVER), "--no-readonly"])}
    rows = await discover(config)
    before, leftovers = children(), _leftovers()

    async def run(n: int) -> None:
        async with ToolEnv(rows, config=config, max_processes=8, warm=4) as env:

            async def one(i: int) -> None:
                async with env.episode() as ep:
                    assert (await ep.call("fresh", "count", {})).text == "1"  # a never-used instance

            await asyncio.gather(*(one(i) for i in range(n)))

    await run(4)  # warm up the loop's own descriptors (selector, thread pool)
    fds = open_fds()
    await run(200)
    assert children() <= before
    assert open_fds() <= fds
    assert _leftovers() <= leftovers


NOBODY_SERVERS = """
import asyncio, json, os, sys
from trajkit.confine import launcher
from trajkit.envs import contain
from trajkit.envs.config import ServerConfig
from trajkit.envs.session import Connection

contain.DISK_MB, contain.MEMORY_MB = 64, 300


async def main() -> dict:
    found = {"missing": launcher.missing()}
    cfg = ServerConfig(command=sys.executable, args=[FILEKV], env={"STATE_FILE": os.path.abspath("data/state.json")})
    conns = [Connection(f"filekv{i}", cfg) for i in range(2)]
    try:
        for i, c in enumerate(conns):
            found[f"put{i}"] = (await c.call("put", {"key": f"m{i}", "value": "v"})).text
        found["dumps"] = [json.loads((await c.call("dump", {})).text) for c in conns]
        found["vandalize"] = (await conns[0].call("vandalize", {"path": os.path.abspath("data/keep.txt")})).text
        found["fill"] = (await conns[1].call("fill", {"mb": 100})).text
        found["hog"] = (await conns[1].call("hog", {"mb": 400})).text
    finally:
        await asyncio.gather(*(c.aclose() for c in conns))
    await asyncio.sleep(0.2)
    me = str(os.getpid())
    found["left"] = [p for p in os.listdir("/proc") if p.isdigit() and p != me and os.stat(f"/proc/{p}").st_uid == os.getuid()]
    return found


print(json.dumps(asyncio.run(main())))
"""


def test_a_non_root_run_contains_a_file_backed_server_through_a_user_namespace():
    """As ``nobody``, with a state folder ``nobody`` owns (so only containment stops the writes): each
    instance sees its own writes only, the host's files stay as they were, disk and memory are capped."""
    with nobody_folder() as folder:
        data = folder / "data"
        data.mkdir()
        (data / "state.json").write_text('{"host": "1"}')
        (data / "keep.txt").write_text("mine")
        for path in (data, data / "state.json", data / "keep.txt"):
            os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid)
        done = run_as_nobody(f"FILEKV = {FILEKV!r}\n{NOBODY_SERVERS}", folder)
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout.splitlines()[-1])
        assert found["missing"] is None and found["put0"] == found["put1"] == "ok"
        assert found["dumps"] == [{"host": "1", "m0": "v"}, {"host": "1", "m1": "v"}]  # each its own writes
        assert found["vandalize"] == "done" and found["fill"] == "error: No space left on device"
        assert found["hog"].startswith("failed") and found["left"] == []
        assert (data / "state.json").read_text() == '{"host": "1"}' and (data / "keep.txt").read_text() == "mine"
        assert sorted(os.listdir(data)) == ["keep.txt", "state.json"]


def test_a_non_root_run_where_proc_is_masked_refuses_containment_in_one_line():
    script = (
        "from trajkit.envs import contain\nfrom trajkit.confine.isolation import ProtectionMissing\n"
        "try:\n    contain.enabled()\nexcept ProtectionMissing as exc:\n    print(exc)\n"
    )
    with nobody_folder() as folder:
        done = run_as_nobody(script, folder, mask_proc=True)
    assert done.stdout.startswith("sandbox: this machine cannot give per-trajectory server containment (a user")
    assert "may not mount its own /proc here" in done.stdout and done.stdout.count("\n") == 1


async def test_harvest_warms_the_package_caches_once_for_every_later_instance(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # the servers' home: its ~/.npm is the package cache
    server = os.path.join(os.path.dirname(__file__), "servers", "pkgcache.py")
    cfg = ServerConfig(command=sys.executable, args=[server])
    row = await describe_server("pkgcache", cfg)  # harvest's start downloads, through to the host's cache
    assert row["status"] == "ok" and (home / ".npm" / "pkgcache.tgz").read_text() == "package"
    for _ in range(1):  # a later instance starts from it, and what they write stays their own
        conn = Connection("pkgcache", cfg)
        try:
            await conn.open()
            assert (await conn.call("start", {})).text == "cached"
            assert (await conn.call("scribble", {"name": "mine.txt"})).text == "written"
        finally:
            await conn.aclose()
    assert sorted(p.name for p in (home / ".npm").iterdir()) == ["pkgcache.tgz"]
