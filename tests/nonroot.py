"""Run a Python script as an unprivileged user (``nobody``), as a non-root user of trajkit would.

The tests run as root (here and in CI), with an interpreter that may live where other users
cannot go (``/root/.pyenv``, a checkout under a ``0700`` folder). The script's process starts
as root in a private mount namespace of the host's user namespace, with a /proc of its own,
where each closed folder on the way to the interpreter, the environment, the checkout and
``folder`` is laid over with a world-readable tmpfs holding just those paths; then it becomes
``nobody`` for good (no groups, no capabilities) and executes the interpreter. Nothing on the
host changes. The files themselves must be readable by others (a checkout made with umask 022).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
NOBODY = pwd.getpwnam("nobody")

_BECOME_NOBODY = """
import os, sys
sys.path.insert(0, {checkout!r})
from trajkit.confine import isolation
isolation.unshare(isolation.CLONE_NEWNS)
isolation.mount(None, "/", None, isolation.MS_REC | isolation.MS_PRIVATE)
isolation.mount("proc", "/proc", "proc", isolation.MS_NOSUID | isolation.MS_NODEV | isolation.MS_NOEXEC)
if {mask_proc!r}:
    isolation.mount("tmpfs", "/proc/sys", "tmpfs", 0, "size=4k")
closed = set()  # the first folder on the way to each needed path that others may not enter (e.g. /root)
for path in {needed!r}:
    parts = path.strip("/").split("/")
    for i in range(1, len(parts) + 1):
        if not os.stat("/" + "/".join(parts[:i])).st_mode & 0o001:
            closed.add("/" + "/".join(parts[:i]))
            break
copies = [(isolation.detached_copy(p), p) for p in {needed!r} if any(p.startswith(c + "/") for c in closed)]
for folder in closed:
    isolation.mount("tmpfs", folder, "tmpfs", isolation.MS_NOSUID | isolation.MS_NODEV, "size=1m,mode=0755")
for fd, path in copies:
    os.makedirs(path, exist_ok=True)
    isolation.attach(fd, path)
isolation.drop_privileges({uid})
os.chdir({folder!r})
os.execv(sys.executable, [sys.executable, {script!r}])
"""


@contextlib.contextmanager
def nobody_folder() -> Iterator[Path]:
    """A fresh folder in the temporary directory that ``nobody`` can read (not pytest's ``tmp_path``: it sits
    in a ``0700`` folder, which an overlay over /tmp would show without the tmpfs laid over it)."""
    folder = Path(tempfile.mkdtemp(prefix="trajkit-nonroot-"))
    try:
        folder.chmod(0o755)
        yield folder
    finally:
        shutil.rmtree(folder)


def run_as_nobody(
    script: str, folder: Path, timeout_s: float = 60, mask_proc: bool = False
) -> subprocess.CompletedProcess:
    """Run ``script`` as ``nobody`` with ``folder`` (from ``nobody_folder``) as its working directory.

    /proc is a fresh one, as on a host: a container masks parts of its /proc, and the kernel then refuses a
    user namespace a /proc of its own. ``mask_proc`` masks a part (/proc/sys), as a container does."""
    path = folder / "script.py"
    path.write_text(f"import sys\nsys.path.insert(0, {str(CHECKOUT)!r})\n{script}")
    needed = sorted({sys.prefix, sys.base_prefix, str(CHECKOUT), str(folder)})
    for p in needed:
        assert os.stat(p).st_mode & 0o005 == 0o005, f"{p} is not readable by other users (umask?)"
    become = _BECOME_NOBODY.format(
        checkout=str(CHECKOUT),
        needed=needed,
        uid=NOBODY.pw_uid,
        folder=str(folder),
        script=str(path),
        mask_proc=mask_proc,
    )
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": NOBODY.pw_dir, "LANG": "C.UTF-8"}
    return subprocess.run(
        [sys.executable, "-c", become], env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )
