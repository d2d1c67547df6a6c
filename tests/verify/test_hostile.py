"""Hostile programs against the full sandbox: each is judged not-pass and contained, and everything survives.

Each program is written so that it *finishes* (and would pass its trivial test)
only if its attack worked; the tests then check the containment itself:
no connection reached the listener, no file appeared, the secret is nowhere,
the workers and this process are alive, and nothing of the sandbox's users is
left running on the host.
"""

from __future__ import annotations

import ast
import json
import os
import select
import socket
import uuid
from pathlib import Path

import pytest

from trajkit.verify import Sandbox, verify, verify_many

SECRET = f"tk-secret-{uuid.uuid4().hex}"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def hostile_pool():
    """A pool that requires every protection, started from the repository while holding secrets in its env."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(REPO)
        for name in ("OPENAI_API_KEY", "HF_TOKEN", "TRAJKIT_TEST_SECRET"):
            mp.setenv(name, SECRET)
        sandbox = Sandbox(workers=2, namespaces=True, drop_privileges=True).start()
    yield sandbox
    sandbox.close()


@pytest.fixture
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    server.close()


def _mbpp(code: str, timeout_s: float = 20, memory_mb: int = 256) -> dict:
    """A verifier whose test always passes: the program passes if and only if it runs to its end."""
    spec = {"test": "assert True", "timeout_s": timeout_s, "memory_mb": memory_mb}
    return {"kind": "unit_tests", "spec": json.dumps(spec)}, code


def _processes_of(uids: set[int]) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid in uids:
                found.append(int(entry))
        except FileNotFoundError:
            continue
    return found


def test_hostile_programs_are_judged_not_pass_and_contained(hostile_pool, listener, tmp_path):
    port = listener.getsockname()[1]
    outside = [REPO / f"pwned-{uuid.uuid4().hex}", tmp_path / "pwned", Path("/var/tmp") / f"pwned-{uuid.uuid4().hex}"]
    attacks = {
        "fork bomb": _mbpp("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", 2),
        "memory bomb": _mbpp("x = []\nwhile True:\n    x.append(bytearray(1 << 24))"),
        "infinite loop": _mbpp("while True:\n    pass", 2),
        "sleep": _mbpp("import time\ntime.sleep(60)", 2),
        "loopback": _mbpp(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'x')"),
        **{f"write {p}": _mbpp(f"open({str(p)!r}, 'w').write('pwned')") for p in outside},
        "secret": _mbpp(
            "import glob, os\nprint(dict(os.environ))\n"
            "for path in glob.glob('/proc/*/environ'):\n"
            "    try:\n        print(path, open(path, 'rb').read())\n"
            "    except OSError as e:\n        print(path, e)\n"
            "assert 'OPENAI_API_KEY' in os.environ or 'HF_TOKEN' in os.environ"
        ),
        "kill parent": _mbpp(
            "import os, signal, time\nparent = os.getppid()\n"
            f"for pid in (parent, 1, {os.getpid()}, -1):\n"
            "    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\n"
            "time.sleep(0.2)\nos.kill(parent, 0)\nraise SystemExit('the parent survived')"
        ),
        "stdout flood": _mbpp("while True:\n    print('x' * 1000)"),
        "daemon": _mbpp(
            "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(30)\n    os._exit(0)\n"
            "raise SystemExit('left a daemon behind')"
        ),
    }
    pids_before = [w.proc.pid for w in hostile_pool._pool]
    results = dict(zip(attacks, verify_many([(v, c, None) for v, c in attacks.values()], sandbox=hostile_pool)))

    for name, result in results.items():
        assert result.verdict != "pass", f"{name}: {result}"
        assert result.verdict != "error" or name == "kill parent", f"{name}: {result}"
    assert results["memory bomb"].verdict == "memory"
    for name in ("infinite loop", "sleep"):
        assert results[name].verdict == "timeout" and results[name].runtime_s < 20
    assert "output exceeded" in results["stdout flood"].details["reason"]
    assert len(results["stdout flood"].output_tail) <= 2000

    assert not select.select([listener], [], [], 0.5)[0], "a program reached the loopback listener"
    for path in outside:
        assert not path.exists(), f"a program wrote {path}"
    for result in results.values():
        assert SECRET not in json.dumps([result.details, result.output_tail])
    assert "OPENAI_API_KEY" not in results["secret"].output_tail

    assert [w.proc.pid for w in hostile_pool._pool] == pids_before, "a worker died"
    assert all(w.proc.poll() is None for w in hostile_pool._pool)
    assert not _processes_of({w.uid for w in hostile_pool._pool}), "sandbox processes outlived their run"
    again = hostile_pool.run("print('still serving')")
    assert again.verdict == "pass" and again.stdout == "still serving\n"


def test_secret_is_absent_from_the_raw_run(hostile_pool):
    program = (
        "import os, sys\nprint(os.environ)\n"
        "try:\n    print(open('/proc/self/environ').read(), file=sys.stderr)\n"
        "except OSError as e:\n    print(e, file=sys.stderr)"
    )
    r = hostile_pool.run(program)
    assert r.verdict == "pass"
    assert SECRET not in r.stdout + r.stderr and "HF_TOKEN" not in r.stdout + r.stderr


def test_filesystem_is_read_only_and_the_callers_directories_are_hidden(hostile_pool):
    program = f"""
import json, os
for path in ("/etc/trajkit-pwned", "/usr/trajkit-pwned", "/dev/shm/../trajkit-pwned"):
    try:
        open(path, "w").write("x")
        print("WROTE", path)
    except OSError as e:
        print("blocked", path, e.errno)
print(json.dumps(sorted(os.listdir({str(REPO)!r}))))
print(os.path.exists({str(REPO / "pyproject.toml")!r}))
"""
    r = hostile_pool.run(program)
    assert r.verdict == "pass" and "WROTE" not in r.stdout
    assert not Path("/etc/trajkit-pwned").exists() and not Path("/usr/trajkit-pwned").exists()
    *_, listing, pyproject = r.stdout.splitlines()
    assert set(json.loads(listing)) <= {".venv"}, "the repository (the caller's working directory) is visible"
    assert pyproject == "False"


def test_no_user_namespaces_no_host_cgroups_no_checkout(hostile_pool):
    """Inside, user namespaces cannot be created (seccomp), and the host's cgroups, its tools and trajkit's checkout
    are not there."""
    program = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.unshare(0x10000000), ctypes.get_errno())\n"
        "print([os.path.exists(p) for p in ('/sys/fs/cgroup', '/usr/bin/unshare', '/bin/sh')])\n"
        f"print(sorted(os.listdir({str(REPO)!r})))\n"
    )
    r = hostile_pool.run(program)
    assert r.verdict == "pass", r
    unshare, there, checkout = r.stdout.splitlines()
    assert unshare == "-1 1" and there == "[False, False, False]"
    assert set(ast.literal_eval(checkout)) <= {".venv"}  # the interpreter's environment is bound back, nothing else
    assert hostile_pool.protections["seccomp"]


def test_the_callers_keyrings_are_out_of_reach():
    """A key in the caller's session keyring (programs inherit it: keyrings are not namespaced) cannot be
    found or read, and no key can be added (seccomp refuses the keyring calls)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    key = libc.syscall(248, b"user", b"trajkit-test-key", SECRET.encode(), len(SECRET), -3)  # add_key, session
    assert key > 0, os.strerror(ctypes.get_errno())
    program = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "for ring in (-3, -4, -5):  # session, user, user-session\n"
        "    found = libc.syscall(250, 10, ring, b'user', b'trajkit-test-key', 0)  # keyctl search\n"
        "    buffer = ctypes.create_string_buffer(256)\n"
        "    print(found, ctypes.get_errno(), libc.syscall(250, 11, found, buffer, 256), buffer.value)\n"
        "print(libc.syscall(248, b'user', b'mine', b'x', 1, -3), ctypes.get_errno())\n"
    )
    try:
        with Sandbox(workers=1) as sandbox:  # started after the key was added
            r = sandbox.run(program)
    finally:
        libc.syscall(250, 3, key)  # keyctl revoke
    assert r.verdict == "pass" and SECRET not in r.stdout
    assert r.stdout.splitlines() == ["-1 1 -1 b''"] * 3 + ["-1 1"]  # EPERM


SEARCH = r"""
import json, os, stat, sys
wanted = sys.stdin.read().strip().encode()
for root, dirs, files in (step for top in ("/srv", "/var/tmp", "/tmp", "/") for step in os.walk(top)):
    if root == "/proc":
        dirs[:] = []
    for name in files:
        path = os.path.join(root, name)
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode) or st.st_size > 1 << 20 or name.endswith((".py", ".pyc")) or ".so" in name:
                continue
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        for line in data.splitlines() if wanted in data else []:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if row.get("input") == wanted.decode():
                print(row["output"])
                sys.exit(0)
print("nothing found")
"""


def test_a_program_that_searches_the_whole_filesystem_finds_no_expected_output(tmp_path):
    """The filesystem a program sees is an allowlist: expected outputs planted where an import source would hold
    them (under /tmp, under /srv) and in a second run folder are nowhere in it, for a program that walks it all
    and reads every data file. The same program finds them on the fallback (no namespaces): the test can fail."""
    import shutil

    from trajkit.store import Store

    key = uuid.uuid4().hex
    case = {"input": f"case-{key}", "output": f"expected-{key}"}
    run = Path("/var/tmp") / f"trajkit-run-{key}"
    places = [Path("/tmp") / f"trajkit-import-{key}" / "problems.jsonl", Path("/srv") / f"data-{key}" / "tasks.jsonl"]
    try:
        Store(run, create=True)
        for path in [*places, run / "samples" / "cases.jsonl"]:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"task": "other"}) + "\n" + json.dumps(case) + "\n")
        verifier = {"kind": "stdio", "spec": {"cases": [case], "timeout_s": 20}}
        with Sandbox(workers=1) as sandbox:
            judged = verify(verifier, SEARCH, sandbox=sandbox)
        with Sandbox(workers=1, namespaces=False, drop_privileges=False, cgroups=False, allow_weaker=True) as bare:
            found = verify(verifier, SEARCH, sandbox=bare)
    finally:
        for folder in [run, *(p.parent for p in places)]:
            shutil.rmtree(folder, ignore_errors=True)
    assert judged.verdict == "fail" and "nothing found" in judged.output_tail, judged
    assert found.verdict == "pass", found
