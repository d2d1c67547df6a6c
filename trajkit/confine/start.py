"""How the jail is started from outside it: ``python [FLAGS] FOLDER MODULE ARGS...`` (``command``).

FOLDER holds a link to this package and one to its ``__main__.py``, and nothing else (``folder``). Python puts a
folder it is asked to run on ``sys.path`` (``-I`` and safe paths notwithstanding) and runs its ``__main__.py``,
which runs ``confine.MODULE`` as ``__main__``, as ``-m`` would: so what is started can import the standard library,
this package by relative imports, and, unless ``-S``, the interpreter's site-packages; no other module of trajkit,
and nothing by editing ``sys.path``. The sandbox's workers (``worker``), each contained server's launcher
(``launcher``) and a Python server's fork server (``server_zygote``) start so; none of them needs trajkit installed
in the interpreter that runs it.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
import threading

PACKAGE = os.path.dirname(os.path.abspath(__file__))
_LINKS = {"confine": PACKAGE, "__main__.py": os.path.join(PACKAGE, "__main__.py")}
_private: list[str] = []  # a folder of this process's own, where the shared one's name is taken
_making = threading.Lock()  # one thread of a process makes or mends the folder; the others wait and use it


def command(python: str, module: str, *args: str, flags: tuple[str, ...] = ()) -> list[str]:
    """The command line that runs ``module`` of this package with ``args`` on the interpreter ``python``; always
    ``-B``: Python would otherwise cache the compiled ``__main__.py`` in FOLDER, which then holds more than the
    two links, and the next ``folder`` would make it again under processes starting from it."""
    return [python, "-B", *flags, folder(), module, *args]


def folder() -> str:
    """A folder holding only the links to this package and its ``__main__.py``: one per user and install in the
    temporary directory, checked at every use (this user's, writable by no one else, the two links and nothing
    else) and made again where it is not so (gone with a cleaning of /tmp, say); where its name is taken by
    something that is not this user's, a folder of this process's own, removed at its exit."""
    digest = hashlib.sha256(PACKAGE.encode()).hexdigest()[:16]
    shared = os.path.join(tempfile.gettempdir(), f"trajkit-confine-{os.geteuid()}-{digest}")
    if _sound(shared):
        return shared
    with _making:
        return _make(shared)


def _make(shared: str) -> str:
    if _sound(shared):  # another thread made it meanwhile
        return shared
    if _private and _sound(_private[0]):
        return _private[0]
    fresh = tempfile.mkdtemp(prefix=os.path.basename(shared) + ".")
    for name, target in _LINKS.items():
        os.symlink(target, os.path.join(fresh, name))
    with contextlib.suppress(OSError):
        info = os.lstat(shared)
        # ours, but not as it should be (checked again at once: another process may have just made it, and one
        # starting from it must not lose it): moved aside in one step, then removed
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not _sound(shared):
            aside = fresh + ".old"
            os.rename(shared, aside)
            shutil.rmtree(aside)
    with contextlib.suppress(OSError):
        os.rename(fresh, shared)  # at once, or not at all: another process's that came first stays
    if _sound(shared):
        shutil.rmtree(fresh, ignore_errors=True)
        return shared
    _private[:] = [fresh]
    atexit.register(_remove, fresh, os.getpid())
    return fresh


def _remove(path: str, owner: int) -> None:
    if os.getpid() == owner:  # (not in a forked child that exits)
        shutil.rmtree(path, ignore_errors=True)


def _sound(path: str) -> bool:
    try:
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            return False
        return sorted(os.listdir(path)) == sorted(_LINKS) and all(
            os.readlink(os.path.join(path, name)) == target for name, target in _LINKS.items()
        )
    except OSError:
        return False
