"""The local sandbox's behaviour: what a run returns, limits, fresh state, parallel runs, worker recovery."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from trajkit.verify import RunResult, Sandbox, default_sandbox, make_sandbox


def test_program_sees_stdin_and_prints(sandbox_pool):
    r = sandbox_pool.run("name = input()\nprint('hello', name[::-1])", stdin="dlrow\n")
    assert (r.verdict, r.stdout, r.exit_code, r.finished) == ("pass", "hello world\n", 0, True)


def test_exceptions_exit_codes_and_early_exits(sandbox_pool):
    r = sandbox_pool.run("def f():\n    return 1 / 0\nf()")
    assert r.verdict == "fail" and r.exception.startswith("ZeroDivisionError")
    assert "line 2, in f" in r.stderr and "harness" not in r.stderr
    r = sandbox_pool.run("import sys\nsys.exit(3)")
    assert (r.verdict, r.exit_code) == ("fail", 3)
    r = sandbox_pool.run("import os\nos._exit(0)\nprint('never')")
    assert r.verdict == "pass" and not r.finished, "an early os._exit(0) must not count as finished"
    r = sandbox_pool.run("import sys\nsys.exit(0)")
    assert r.verdict == "pass" and not r.finished and r.exception == "SystemExit: 0"
    r = sandbox_pool.run("def f(:\n")
    assert r.verdict == "fail" and r.exception.startswith("SyntaxError")


def test_program_runs_like_a_script(sandbox_pool):
    program = """
import atexit, threading, pickle, __main__
def work():
    print("from thread")
atexit.register(lambda: print("at exit"))
threading.Thread(target=work).start()
class Point:
    pass
assert pickle.loads(pickle.dumps(Point())).__class__.__name__ == "Point"
assert __main__.Point is Point and __name__ == "__main__"
"""
    r = sandbox_pool.run(program)
    assert r.verdict == "pass" and r.finished
    assert r.stdout.splitlines() == ["from thread", "at exit"]


def test_environment_and_identity_are_the_sandboxs(sandbox_pool):
    program = "import os, socket, tempfile\nprint(os.getuid(), os.getcwd(), os.environ['HOME'], tempfile.gettempdir(), socket.gethostname())"
    uid, cwd, home, tmp, host = sandbox_pool.run(program).stdout.split()
    assert int(uid) in {w.uid for w in sandbox_pool._pool} and int(uid) != 0
    # /tmp itself, or /tmp/.sandbox where the Python environment lives under /tmp (docs/sandbox.md)
    assert cwd == home == tmp and tmp in ("/tmp", "/tmp/.sandbox") and host == "sandbox"


def test_each_run_gets_a_fresh_private_tmp(sandbox_pool):
    write = "import os, tempfile\nd = tempfile.gettempdir()\nopen(d + '/left-behind', 'w').write('x')\nprint(sorted(os.listdir(d)))"
    for _ in range(3):  # whichever worker runs it, nothing from an earlier run is there
        assert sandbox_pool.run(write).stdout == "['left-behind']\n"


def test_timeouts_memory_and_file_size_limits(sandbox_pool):
    r = sandbox_pool.run("while True:\n    pass", timeout_s=1)
    assert r.verdict == "timeout" and r.runtime_s < 10
    r = sandbox_pool.run("x = []\nwhile True:\n    x.append(bytearray(1 << 24))", memory_mb=200)
    assert r.verdict == "memory", r
    r = sandbox_pool.run("import tempfile\nopen(tempfile.gettempdir() + '/big', 'wb').write(b'x' * (100 << 20))")
    assert r.verdict != "pass" and "File too large" in r.stderr


def test_parallel_runs_keep_their_results(sandbox_pool):
    results: dict[int, RunResult] = {}

    def one(i: int) -> None:
        results[i] = sandbox_pool.run(f"import time\ntime.sleep(0.05)\nprint({i} * {i})")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {i: r.stdout.strip() for i, r in results.items()} == {i: str(i * i) for i in range(8)}


def test_a_dead_worker_is_replaced():
    with Sandbox(workers=1) as sandbox:
        worker = sandbox._pool[0]
        old = worker.proc.pid
        os.kill(old, signal.SIGKILL)
        worker.proc.wait()
        r = sandbox.run("print('alive')")
        assert r.verdict == "pass" and r.stdout == "alive\n"
        assert worker.proc.pid != old


def test_make_sandbox_picks_the_kind_a_stage_asks_for():
    with make_sandbox("local") as shared:
        assert shared is default_sandbox() and shared.run("print(1)").stdout == "1\n"
    assert shared.run("print(2)").stdout == "2\n"  # the process-wide pool stays up for the next stage
    with make_sandbox("local", 1) as own:
        assert own is not shared and own.workers == 1 and own.run("print(3)").stdout == "3\n"
    assert own._pool == []  # a stage's own pool is stopped with the stage


def test_required_protection_missing_is_an_error(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    from trajkit.verify import SandboxUnavailable

    with pytest.raises(SandboxUnavailable, match="needs root"):
        Sandbox(workers=1, drop_privileges=True).start()
