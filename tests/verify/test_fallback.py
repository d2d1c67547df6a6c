"""The fallback sandbox (no namespaces, no uid drop, no cgroups): it warns what is missing and still contains.

Forced with parameters, so the same path runs on any host, root or not.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from trajkit.verify import Sandbox, verify


@pytest.fixture(scope="module")
def fallback_pool():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRAJKIT_FALLBACK_SECRET", "fallback-secret-value")
        sandbox = Sandbox(workers=1, namespaces=False, drop_privileges=False, cgroups=False)
        logger = logging.getLogger("trajkit.verify")
        records: list[logging.LogRecord] = []
        handler = logging.Handler()
        handler.emit = records.append
        logger.addHandler(handler)
        try:
            sandbox.start()
        finally:
            logger.removeHandler(handler)
    sandbox.startup_warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    yield sandbox
    sandbox.close()


def test_fallback_warns_and_names_each_missing_protection(fallback_pool):
    # every protection the options turned off is off; the seccomp filter needs none of them
    assert {p for p, on in fallback_pool.protections.items() if on} == {"seccomp"}
    [warning] = fallback_pool.startup_warnings
    for protection in ("uid", "pid_namespace", "net_namespace", "mount_namespace", "cgroup"):
        assert protection in warning
    assert "can open network connections" in warning


def test_fallback_still_judges_and_limits(fallback_pool):
    verifier = {"kind": "unit_tests", "spec": {"test": "assert double(4) == 8", "timeout_s": 1}}
    assert verify(verifier, "def double(x):\n    return 2 * x", sandbox=fallback_pool).verdict == "pass"
    assert verify(verifier, "def double(x):\n    return x", sandbox=fallback_pool).verdict == "fail"
    assert verify(verifier, "import time\ntime.sleep(30)", sandbox=fallback_pool).verdict == "timeout"
    r = fallback_pool.run("x = []\nwhile True:\n    x.append(bytearray(1 << 24))", memory_mb=200)
    assert r.verdict == "memory"


def test_fallback_scrubs_the_environment_and_uses_a_private_tmp(fallback_pool):
    r = fallback_pool.run("import os, tempfile\nprint(dict(os.environ))\nprint(os.getcwd(), tempfile.gettempdir())")
    assert "fallback-secret-value" not in r.stdout and "TRAJKIT_FALLBACK_SECRET" not in r.stdout
    cwd, tmp = r.stdout.splitlines()[1].split()
    assert cwd == tmp != "/tmp" and os.stat(cwd).st_mode & 0o777 == 0o700


def test_fallback_kills_what_a_program_leaves_behind(fallback_pool):
    program = "import os, time\npid = os.fork()\nif pid == 0:\n    os.setsid()\n    time.sleep(60)\n    os._exit(0)\nprint(pid)"
    r = fallback_pool.run(program)
    assert r.verdict == "pass"
    assert not os.path.exists(f"/proc/{int(r.stdout)}"), "the daemonized child outlived its run"


def test_fallback_survives_a_program_that_kills_its_parent(fallback_pool):
    r = fallback_pool.run("import os, signal, time\nos.kill(os.getppid(), signal.SIGKILL)\ntime.sleep(5)")
    assert r.verdict == "error" and "worker" in r.reason
    again = fallback_pool.run("print('back')")
    assert again.verdict == "pass" and again.stdout == "back\n"


NO_CGROUPS = """
from trajkit.verify import Sandbox, SandboxUnavailable
try:
    Sandbox(workers=1, allow_weaker={allow}).start().close()
    print("started")
except SandboxUnavailable as exc:
    print(exc)
"""


def test_a_protection_the_machine_cannot_give_stops_the_start_unless_allowed():
    """With no cgroup hierarchy to write (an empty tmpfs over /sys/fs/cgroup in a private mount namespace),
    the pool refuses to start without the flag, in one line naming the protection."""
    import shlex
    import subprocess
    import sys

    def start(allow: str) -> str:
        python = shlex.join([sys.executable, "-c", NO_CGROUPS.format(allow=allow)])
        command = ["unshare", "-m", "sh", "-c", f"mount -t tmpfs none /sys/fs/cgroup && {python}"]
        return subprocess.run(command, check=False, capture_output=True, text=True, timeout=60).stdout.strip()

    refused = start("None")
    assert refused.startswith("sandbox: this machine cannot give cgroup") and "--allow-weaker-sandbox" in refused
    assert "\n" not in refused
    assert start("True") == "started"


UNDER_TMP = """
from trajkit.verify import Sandbox
with Sandbox(workers=1) as sandbox:
    print(sorted(sandbox.missing))
    r = sandbox.run(
        "import os, tempfile\\nprint(tempfile.gettempdir(), sorted(os.listdir('/tmp')), os.listdir('/dev/shm'))\\n"
        "open(os.path.join(tempfile.gettempdir(), 'x'), 'w').write('ok')\\n"
        "try:\\n    open('/tmp/pwned', 'w')\\nexcept OSError as e:\\n    print('refused', e.errno)\\n"
    )
    print(r.verdict)
    print(r.stdout)
"""


def test_an_environment_under_tmp_gets_every_protection(tmp_path):
    """A Python environment living under /tmp is bound into an otherwise empty, read-only /tmp; programs
    get a private directory there instead of a silent downgrade (no namespaces) as before."""
    import site
    import subprocess
    import sys
    import venv

    assert str(tmp_path).startswith("/tmp/")
    env = tmp_path / "env"
    venv.create(env, with_pip=False)
    paths = env / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    paths.mkdir(parents=True, exist_ok=True)
    checkout = Path(__file__).resolve().parents[2]
    (paths / "trajkit.pth").write_text(f"{site.getsitepackages()[0]}\n{checkout}\n")
    (tmp_path / "host-file").write_text("host")
    done = subprocess.run(
        [str(env / "bin" / "python"), "-c", UNDER_TMP], check=False, capture_output=True, text=True, cwd="/", timeout=60
    )
    missing, verdict, listing, refused = done.stdout.splitlines()[:4]
    assert missing == "[]" and verdict == "pass", done.stdout + done.stderr
    private, rest = listing.split(" ", 1)
    assert private == "/tmp/.sandbox" and "host-file" not in rest and tmp_path.parts[2] in rest  # only the env's path
    assert refused == "refused 30"  # EROFS: the host's /tmp is neither visible nor writable
    assert not (Path("/tmp") / "pwned").exists()
