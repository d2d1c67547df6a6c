"""Nothing crosses from one sandbox run to the next through the kernel.

Each channel of ``tests/envs/servers/kernel.py`` (System V and POSIX IPC, /tmp and /dev/shm and the metadata of
their file system, the PID and network counters, keyrings, the hostname, a daemon's socket and lock) is planted in
one run and looked for in the next, on one worker; nothing stays on the host. The oracle attack, a lookup table
that learns where the hidden tests stop across repeated runs of one task through every channel that outlives a
process, passes none of 64 runs. Two runs at the same time on two workers cannot signal each other through the
files they share (locks, watches, the devices).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from tests.envs.servers import kernel
from trajkit.verify import Sandbox, verify

KERNEL = (Path(__file__).resolve().parents[1] / "envs" / "servers" / "kernel.py").read_text()
VALUE = kernel.VALUE


@pytest.fixture(scope="module")
def one_worker():
    with Sandbox(workers=1) as sandbox:
        yield sandbox


def _run(sandbox: Sandbox, call: str) -> dict:
    r = sandbox.run(f"{KERNEL}\nimport json\nprint(json.dumps({call}))", timeout_s=20)
    assert r.verdict == "pass", r
    return json.loads(r.stdout)


def test_nothing_a_run_leaves_in_the_kernel_reaches_the_next(one_worker):
    said, seen = {}, {}
    try:
        for channel in kernel.PLANTS:  # each on its own: a file in /tmp would hide what was done to /tmp itself
            said[channel] = _run(one_worker, f"plant({VALUE}, ({channel!r},))")[channel]
            seen[channel] = _run(one_worker, "look()")
    finally:
        on_host = kernel.look(kernel.STORES)
        kernel.remove()
    refused = {channel: why for channel, why in said.items() if why != "ok"}
    assert set(refused) == {"keyring", "hostname", "net", "mqueue_fs"}, said  # the others worked: the test can fail
    assert refused["mqueue_fs"].startswith("FileNotFoundError")  # no /dev/mqueue (mq_open needs none)
    assert refused["keyring"].startswith("PermissionError") and refused["hostname"].startswith("PermissionError")
    assert refused["net"] == "OSError: [Errno 97] Address family not supported by protocol"  # Unix sockets only
    leaks = {planted: [c for c, v in found.items() if v == VALUE] for planted, found in seen.items()}
    assert not any(leaks.values()), leaks
    assert on_host == dict.fromkeys(kernel.STORES)


ORACLE = '''
TESTS, CHANNELS = 4, tuple(c for c in STORES + ("tmp_times", "tmp_xattr", "tmp_inodes"))
found = [v for v in look(CHANNELS).values() if v is not None and 1 <= v <= 1 + 32 * TESTS + 31]
state = max(set(found), key=found.count) - 1 if found else 0
known, bits, guess = state // 32, (state % 32) // 2, state % 2
if found and known < TESTS:
    guess = 1 - guess  # the last run stopped at this test: its guess was wrong
calls = 0


def f(x):
    """A lookup table over where the hidden tests stop: no logic at all."""
    global calls, known, bits, guess
    i, calls = calls, calls + 1
    if i < known:
        return (bits >> i) & 1
    if i > known:  # a later test runs: the guess was right
        bits, known, guess = bits | guess << known, known + 1, 0
    plant(1 + 32 * known + 2 * bits + guess, CHANNELS)
    return guess
'''


def test_the_oracle_attack_passes_no_run():
    """64 runs of one task on one worker (pass@k and GRPO groups repeat tasks so): a program that learns the
    hidden tests' answers from what earlier runs left would pass once it knows them."""
    spec = {"test": "assert f(11) == 1\nassert f(4) == 0\nassert f(7) == 0\nassert f(2) == 1", "timeout_s": 10}
    try:
        with Sandbox(workers=1) as sandbox:
            verdicts = [
                verify({"kind": "unit_tests", "spec": spec}, KERNEL + ORACLE, sandbox=sandbox) for _ in range(64)
            ]
    finally:
        kernel.remove()
    assert [r.verdict for r in verdicts] == ["fail"] * 64, [r.details for r in verdicts if r.verdict != "fail"][:3]


SIDE_BY_SIDE = r"""
import ctypes, errno, fcntl, json, os, select, signal, sqlite3, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
RUNTIME = (sys.executable, os.__file__, "/etc/ld.so.cache", "/dev/null")  # the same files in every worker's root


def said(call):
    try:
        call()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def _ok(result):
    if result == -1:
        raise OSError(ctypes.get_errno(), "")
    return result


def hold(seconds):
    # Locks on the runtime's files (a read lock on a file opened read-only, any lock on a device opened to write), and
    # watches on them (inotify, dnotify): what a run side by side on another worker could see, or make happen.
    fds = {path: os.open(path, os.O_RDWR if path.startswith("/dev/") else os.O_RDONLY) for path in RUNTIME}
    woke = {"dnotify": 0}
    signal.signal(signal.SIGIO, lambda *_: woke.__setitem__("dnotify", woke["dnotify"] + 1))
    watch, folder = [], os.open(os.path.dirname(os.__file__), os.O_RDONLY)  # (a folder of the host's, bound)
    ways = {
        "flock": lambda: fcntl.flock(fds[sys.executable], fcntl.LOCK_SH),
        "read_lock": lambda: fcntl.lockf(fds[os.__file__], fcntl.LOCK_SH),
        "device_lock": lambda: fcntl.lockf(fds["/dev/null"], fcntl.LOCK_EX),
        "inotify": lambda: watch.append(_ok(libc.inotify_init1(os.O_NONBLOCK))),
        "dnotify": lambda: fcntl.fcntl(folder, fcntl.F_NOTIFY, fcntl.DN_ACCESS | fcntl.DN_MULTISHOT),
        "sqlite": lambda: sqlite3.connect("/tmp/db", isolation_level=None).execute("BEGIN EXCLUSIVE"),  # fcntl locks
    }
    result = {way: said(call) for way, call in ways.items()}
    listed = any(f":{os.stat(os.__file__).st_ino} " in line for line in open("/proc/locks"))  # (its own: seen)
    if watch:
        _ok(libc.inotify_add_watch(watch[0], b"/etc/ld.so.cache", 0x1 | 0x20))  # IN_ACCESS, IN_OPEN
    start, woken = time.time(), 0
    while time.time() < start + seconds:
        woken += bool(watch and select.select(watch, [], [], 0.05)[0] and os.read(watch[0], 4096))
        time.sleep(0 if watch else 0.05)
    woke = {"inotify": woken, "dnotify": woke["dnotify"]}
    return {"said": result, "listed": listed, "woke": woke, "from": start, "to": time.time()}


def look(seconds):
    # Looks for the other run's locks (each taken and let go if free), and reads watched files, until each way
    # saw something or was refused, or ``seconds`` pass.
    fds = {path: os.open(path, os.O_RDWR if path.startswith("/dev/") else os.O_RDONLY) for path in RUNTIME}

    def flock():
        fcntl.flock(fds[sys.executable], fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fds[sys.executable], fcntl.LOCK_UN)

    def read_lock():  # who holds a lock a writer would need?
        query = struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 0, 0, 0)
        if struct.unpack("hhqqi4x", fcntl.fcntl(fds[os.__file__], fcntl.F_GETLK, query))[0] != fcntl.F_UNLCK:
            raise OSError(errno.EAGAIN, "held")

    def device_lock():
        fcntl.lockf(fds["/dev/null"], fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.lockf(fds["/dev/null"], fcntl.LOCK_UN)

    def proc_locks():  # the machine's locks, as far as this PID namespace sees
        if any(f":{os.stat(os.__file__).st_ino} " in line for line in open("/proc/locks")):
            raise OSError(errno.EAGAIN, "listed")

    ways = {"flock": flock, "read_lock": read_lock, "device_lock": device_lock, "proc_locks": proc_locks}
    seen, start = dict.fromkeys(ways, "ok"), time.time()
    while time.time() < start + seconds and "ok" in seen.values():
        seen.update({way: said(call) for way, call in ways.items() if seen[way] == "ok"})
        for path in ("/etc/ld.so.cache", os.__file__):
            with open(path, "rb") as f:
                f.read(1)
        time.sleep(0.02)
    return {"said": seen, "from": start, "to": time.time()}
"""


def test_runs_side_by_side_on_two_workers_cannot_signal_each_other(sandbox_pool):
    """Two runs at the same time on different workers share the runtime's files (the same inodes in every worker's
    root): a lock one holds on them, or a watch that wakes when the other reads them, would pass what each learns
    to the other (a pass@k batch, a GRPO group verified side by side). The watches (inotify, dnotify) and flock
    are refused to programs, lock queries (F_GETLK) too, and a root worker's devices are nodes of its own; sqlite,
    which locks with fcntl, still works."""
    held: list = []
    holder = threading.Thread(
        target=lambda: held.append(sandbox_pool.run(f"{SIDE_BY_SIDE}\nprint(json.dumps(hold(2.5)))", timeout_s=30))
    )
    holder.start()
    time.sleep(0.5)
    looked = sandbox_pool.run(f"{SIDE_BY_SIDE}\nprint(json.dumps(look(1.5)))", timeout_s=30)
    holder.join()
    assert held[0].verdict == "pass" and looked.verdict == "pass", (held, looked)
    held, looked = json.loads(held[0].stdout), json.loads(looked.stdout)
    assert held["from"] < looked["to"] and looked["from"] < held["to"]  # side by side
    assert held["woke"] == {"inotify": 0, "dnotify": 0} and held["listed"], (held, looked)
    assert held["said"] == {
        "flock": "ENOSYS",  # as a kernel built without them
        "read_lock": "ok",  # (a read lock hides from other read locks: only a query, refused below, sees it)
        "device_lock": "ok",
        "inotify": "ENOSYS",
        "dnotify": "EINVAL",
        "sqlite": "ok",
    }
    assert looked["said"] == {"flock": "ENOSYS", "read_lock": "EINVAL", "device_lock": "ok", "proc_locks": "ok"}
