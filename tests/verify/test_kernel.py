"""Nothing crosses from one sandbox run to the next through the kernel.

Each channel of ``tests/envs/servers/kernel.py`` (System V and POSIX IPC, /tmp and /dev/shm and the metadata of
their file system, the PID and network counters, keyrings, the hostname, a daemon's socket and lock) is planted in
one run and looked for in the next, on one worker; nothing stays on the host. The oracle attack, a lookup table
that learns where the hidden tests stop across repeated runs of one task through every channel that outlives a
process, passes none of 64 runs.
"""

from __future__ import annotations

import json
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
