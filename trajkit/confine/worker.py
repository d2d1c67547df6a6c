"""The sandbox worker: a fork server that runs each program in a confined child process.

``Sandbox`` starts one per slot as ``python -B -s FOLDER worker`` (``start.command``)
— a fresh interpreter with an environment built from scratch, never a fork of the
caller — and talks to it over stdin/stdout with length-prefixed JSON
messages. Standard library only. Three processes per slot:

- the *supervisor* (root where available) makes the slot's cgroup, enters new
  mount, network, PID, IPC and UTS namespaces (not root: inside a new user
  namespace that owns them), forks the zygote (``zygote.fork_init``), and removes
  the cgroup (and the fallback's private directory) once the zygote is gone;
- the *zygote*, PID 1 of the new PID namespace and a member of the cgroup,
  makes its root an allowlist (read-only), mounts a private /tmp, pre-imports
  modules, then serves requests until the caller closes the pipe, entering a
  new IPC namespace for each;
- per program, a *child* forked from the zygote: it sets rlimits, drops to
  the slot's uid (not root: keeps the caller's) with no capabilities and no new privileges, and runs the
  program through ``harness.execute``.

The zygote enforces the wall-time limit and the output cap, then kills every
process the program left behind before answering. ``--once FILE`` runs one
request without namespaces and prints the answer (the e2b backend runs the
worker that way inside a cloud sandbox).

Files: this one (the supervisor and the entry point), ``messages.py`` (the
pipe protocol), ``program_zygote.py`` (confinement and the per-program child),
``zygote.py`` (what it shares with a server's zygote),
``outcome.py`` (watching a run and classifying how it ended), ``harness.py``
(what runs inside the child), ``crossing.py`` (what crosses between a unit-test
run's two processes) and ``isolation.py`` (namespaces, mounts, cgroups).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import traceback

from . import isolation, outcome
from .messages import read_message, write_message
from .program_zygote import Zygote, force_remove
from .zygote import fork_init, wait_init

NAMESPACES = ("pid_namespace", "net_namespace", "ipc_namespace", "mount_namespace")  # the protections they give


def supervise(config: dict) -> None:
    """Make the cgroup, enter the namespaces, fork the zygote, and clean up after it.

    The zygote ends when the caller closes its pipe or dies (end of file on
    stdin); this process then removes the cgroup. SIGTERM kills the zygote first.
    """
    missing: dict[str, str] = {}
    cgroup = None
    if config.get("cgroups") is False:
        missing["cgroup"] = "disabled"
    else:
        try:  # not root: works only where the caller's cgroup subtree is delegated to it
            cgroup = isolation.Cgroup(config["name"])
        except OSError as exc:
            missing["cgroup"] = str(exc)
    namespaces = False
    if config.get("namespaces") is False:
        missing.update({k: "disabled" for k in NAMESPACES})
    else:
        try:  # not root: inside a user namespace of the caller's own, whose capabilities programs never hold
            if os.geteuid() != 0 and isolation.own_proc_refused():
                raise OSError(isolation.OWN_PROC_REFUSED)
            config["user_namespace"] = isolation.enter_namespaces(isolation.NAMESPACES)
            namespaces = True
        except OSError as exc:
            missing.update({k: str(exc) for k in NAMESPACES})
    # Programs get a fresh /tmp; where this interpreter lives under /tmp or /dev/shm, a fresh directory
    # in /tmp instead (the sandbox's root holds the interpreter's files at their place there, read-only).
    private = "/tmp/.sandbox" if _covered_by_private_mounts() else "/tmp"
    tmp = private if namespaces else tempfile.mkdtemp(prefix="trajkit-sandbox-")
    pid = fork_init()  # the zygote, PID 1 of the new PID namespace
    if pid == 0:
        zygote = Zygote(config, cgroup, namespaces, missing, tmp)
        try:
            write_message(1, {"ready": True, **zygote.setup()})
            while (request := read_message(0)) is not None:
                write_message(1, _serve(zygote, request, lambda: read_message(0)))
            zygote.close()
        except BaseException:  # noqa: BLE001 - say why on stderr, then end the namespace with it
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    try:
        wait_init(pid)  # (asked to end: the zygote first)
    finally:
        if cgroup is not None:
            cgroup.remove()
        if not namespaces:
            shutil.rmtree(tmp, onerror=force_remove)


def _covered_by_private_mounts() -> str | None:
    """/tmp or /dev/shm if this interpreter's files live there (programs get fresh, empty ones), else None."""
    started_from = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # (not in the sandbox's root)
    for place in (sys.prefix, sys.base_prefix, *sys.path):
        path = os.path.realpath(place) if place and place != started_from else ""
        for mount in ("/tmp", "/dev/shm"):
            if path.startswith(mount + "/"):
                return mount
    return None


def _serve(zygote: Zygote, request: dict, next_message=None) -> dict:
    try:
        return zygote.run(request, next_message)
    except Exception as exc:  # noqa: BLE001 - a fault of the sandbox itself (fork refused...): an error verdict
        isolation.kill_everything(zygote.namespaces)
        return outcome.answer("error", reason=f"sandbox: {type(exc).__name__}: {exc}")


def run_once(path: str) -> None:
    """Run the one request in ``path`` with rlimits only and print the answer as JSON."""
    with open(path) as f:
        request = json.load(f)
    isolation.prctl(isolation.PR_SET_PDEATHSIG, signal.SIGKILL)
    tmp = tempfile.mkdtemp(prefix="trajkit-sandbox-")
    zygote = Zygote(request.pop("config", {}), None, False, {}, tmp)
    zygote.setup()
    answer = _serve(zygote, request)
    zygote.close()
    shutil.rmtree(tmp, onerror=force_remove)
    sys.stdout.write(json.dumps(answer))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--once"]:
        run_once(sys.argv[2])
    else:
        supervise(read_message(0))
