"""What the jail's two zygotes share, and the contained launcher with them.

A zygote confines its own world once, then forks a confined child per request: the sandbox worker's zygote one per
program run (``program_zygote.py``: the program runs through the harness, under rlimits and a uid of its own), a
Python MCP server's zygote one per instance (``server_zygote.py``: the server imported once, each instance
contained as a spawned one is, ``launcher.run``). The same in both, and here:

- each is PID 1 of new namespaces, forked by a process that stays outside to watch it (``fork_init``,
  ``wait_init``): the sandbox's supervisor, which then removes the worker's cgroup; the server zygote's watcher,
  which then sweeps its instances' cgroups; and, per contained instance, the launcher, whose pid 1 holds the server;
- a forked child takes its descriptors from the zygote's (``place``), and none of the jail's modules is left where
  the code it runs next could import them by name (``forget``);
- a program or a server ends as the interpreter would end it (``exit_status``, ``finish_like_python``).

What differs stays in each: how requests come (one run at a time over the worker's pipe, the tests read by the tests'
process itself; instances side by side over a socket pair, each with its own), what a child runs, and how children
are reaped (everything left killed after each run; each instance's status told to its client).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import sys
import types

from . import isolation


def fork_init() -> int:
    """Fork PID 1 of the PID namespace this process entered last (without one: a plain child): 0 in the child, which
    dies with this process (parent-death SIGKILL, and with it its whole namespace), its pid here."""
    pid = os.fork()
    if pid == 0:
        isolation.prctl(isolation.PR_SET_PDEATHSIG, signal.SIGKILL)
    return pid


def wait_init(pid: int) -> int:
    """Wait for ``fork_init``'s child to end, killing it (and so every process of its namespace) if this process is
    asked to end (SIGTERM, SIGINT, SIGHUP); its exit code (a signal's: negative, as ``waitstatus_to_exitcode``)."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda _s, _f: _kill(pid))
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def place(fds: dict[int, int]) -> None:
    """Make each descriptor ``fds[target]`` this process's ``target`` (one may be another's target: each is copied
    out of the way first). The sources stay open: closing what the child must not keep is the caller's."""
    copies = {target: fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 100) for target, fd in fds.items()}
    for target, copy in copies.items():
        os.dup2(copy, target)
        os.close(copy)


def forget() -> None:
    """Drop this package's modules from ``sys.modules`` (they run on): the code run next, a program or a server's
    body, finds none of them by name, nor a package of its own of the same name shadowed by this one. They are found
    as the package's attributes (an import sets each there), not by a scan of ``sys.modules``: with the preloaded
    libraries, that held about 800 names, a scan per forked child cost 3-4% of a unit-test sample's CPU."""
    package = sys.modules.pop(__package__)
    for name, value in vars(package).items():
        if isinstance(value, types.ModuleType) and value.__name__ == f"{__package__}.{name}":
            sys.modules.pop(value.__name__, None)


def exit_status(code: object) -> int:
    """The status ``sys.exit(code)`` ends an interpreter with (a code that is not a number goes to stderr)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(Exception):
        print(code, file=sys.stderr)
    return 1


def finish_like_python() -> None:
    """Join non-daemon threads and run atexit handlers, as the interpreter does at exit."""
    threading = sys.modules.get("threading")
    if threading is not None:
        for thread in threading.enumerate():
            if thread is not threading.main_thread() and not thread.daemon:
                thread.join()
    import atexit

    if atexit._ncallbacks():
        atexit._run_exitfuncs()
