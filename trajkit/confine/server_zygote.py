"""A Python stdio MCP server's zygote: a fork server of its instances (what it shares with the sandbox's is in
``zygote.py``).

``PYTHON -B FOLDER server_zygote serve CONTROL_FD CLIENT_PID SPEC -- ENTRY...`` (``start.command``) runs on the
server's own interpreter, with its environment and cwd (ENTRY is ``-m MODULE ARGS...`` or ``SCRIPT ARGS...``, as the server's
config says). In a mount namespace of its own where the host is read-only (``launcher._contain`` with
SPEC: no writable path), locked so (a user namespace's copy of it: the server's body runs with our
capabilities), and a network namespace with no interfaces where SPEC says ``network: false`` (what the
body opens is inherited), it imports once what the
entry module imports (a module that writes files when imported fails here, and is imported by each
instance in its own overlays) and, where the entry ends with an ``if __name__ == "__main__":`` block,
runs the rest of the entry once as ``__main__`` with the server's ``sys.argv`` (``_prepare``), then
imports what a rehearsal start of that block imports (``_rehearse``); nothing is served yet. Then it
takes instances on CONTROL_FD, its end of a unix socket pair the client made (no path: nothing on disk
outlives a killed client, and nothing an instance could connect to): each brings the zygote's end of a socket
pair of the instance's own, and its request on that carries the instance's stdin, stdout and stderr and its
containment spec; the zygote forks, and the child, contained as the spec says
(``launcher.run``), runs that ``__main__`` block alone, or, where there was none or the rest failed
here, the whole entry module as ``__main__`` (``runpy``), as the launcher (``launcher.py``) does. The
zygote answers ``pid N`` at once and ``exit CODE`` when the instance is gone; ``term`` on the request's
socket sends the instance SIGTERM, and a client that hangs up has it killed (``forks.Zygote.instance``
is that client). The zygote dies with its client (parent-death signal), and each instance with the zygote.

Standard library only (started as ``start.command`` says): a server's interpreter need not have trajkit
installed.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from typing import TYPE_CHECKING

from . import isolation as iso
from . import launcher, zygote

if TYPE_CHECKING:
    from collections.abc import Callable

MAX_SPEC = 1 << 16


def _server_path(entry: list[str]) -> None:
    """``sys.path[0]`` as ``python ENTRY`` sets it: the working directory for ``-m``, else the script's folder, in
    place of the folder this package was started from (``start.folder``)."""
    if sys.path and sys.path[0] == os.path.dirname(os.path.dirname(os.path.abspath(__file__))):
        del sys.path[0]
    if not getattr(sys.flags, "safe_path", False):
        sys.path.insert(0, os.getcwd() if entry[0] == "-m" else os.path.dirname(os.path.realpath(entry[0])))


def _entry(entry: list[str]) -> tuple[str, object, dict] | None:
    """The entry module's file, its parsed source, and the globals ``python ENTRY`` gives it (None: not found)."""
    import ast
    import importlib.util

    if entry[0] == "-m":
        spec = importlib.util.find_spec(entry[1])
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(entry[1] + ".__main__")
        if spec is None or not spec.has_location:
            return None
        path = spec.origin
        init = {"__cached__": spec.cached, "__loader__": spec.loader, "__package__": spec.parent, "__spec__": spec}
    else:
        path = entry[0]
        init = {"__cached__": None, "__loader__": None, "__package__": None, "__spec__": None}
    with open(path, "rb") as f:
        return path, ast.parse(f.read()), {"__name__": "__main__", "__file__": path, **init}


def _preload(tree: object, package: str) -> None:
    """Import what the entry module's source imports (relative imports made absolute), each name too; a module
    that fails to import is left to the instances."""
    import ast
    import contextlib
    import importlib
    import importlib.util

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found = [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = importlib.util.resolve_name("." * node.level + base, package)
            found = [(base, [alias.name for alias in node.names])]
        else:
            continue
        for module, names in found:
            if module == "__main__" or module.endswith(".__main__"):
                continue
            with contextlib.suppress(Exception, SystemExit):
                loaded = importlib.import_module(module)
                for name in names:
                    if name != "*" and not hasattr(loaded, name):
                        with contextlib.suppress(Exception, SystemExit):
                            importlib.import_module(f"{module}.{name}")


def _prepare(path: str, tree: object, init: dict, argv: list[str]) -> object | None:
    """Where the entry module ends with an ``if __name__ == "__main__":`` block (and no ``else``): run the rest
    as ``__main__`` here, once, with the server's ``sys.argv``, and return that block's code, all an instance
    then runs. None (each instance runs the whole module) where it has no such block, or the rest failed here
    (a write refused, say)."""
    import ast
    import types

    last = tree.body[-1] if tree.body else None
    guard = "__name__ == '__main__'", "'__main__' == __name__"
    if not isinstance(last, ast.If) or last.orelse or ast.unparse(last.test) not in guard:
        return None
    main = types.ModuleType("__main__")
    main.__dict__.update(init)
    saved = sys.modules["__main__"], sys.argv
    sys.modules["__main__"], sys.argv = main, argv
    try:
        exec(compile(ast.Module(body=tree.body[:-1], type_ignores=[]), path, "exec"), main.__dict__)  # noqa: S102
    except BaseException:  # noqa: BLE001 - the instances run it whole, and meet the error themselves
        sys.modules["__main__"], sys.argv = saved
        return None
    return compile(ast.Module(body=last.body, type_ignores=[]), path, "exec")


REHEARSAL_S = 2.0
UNFIT = 75  # the zygote's exit status when what the server imports started a thread or a process: it cannot fork
REHEARSED_UNFIT = 76  # when what its rehearsal found did: it is started again without the rehearsal


def _rehearse(main: object, close: list[int]) -> None:
    """Run the ``__main__`` block once in a throwaway child whose stdin is at its end (a server that starts and
    finds its client gone), and import here what that imported: the modules a server loads only once it runs
    (its event loop's, its transport's) are then loaded once for every instance instead of by each. The child
    sees the host read-only, as this process does, and serves nothing; it is killed after ``REHEARSAL_S``.
    (A module whose import starts a thread or a process leaves the zygote unfit to fork: ``serve`` checks.)"""
    import contextlib
    import importlib
    import select
    import time

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        iso.prctl(iso.PR_SET_PDEATHSIG, signal.SIGKILL)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        for fd in (r, null, *close):
            os.close(fd)
        before = set(sys.modules)
        with contextlib.suppress(BaseException):
            exec(main, sys.modules["__main__"].__dict__)  # noqa: S102
        with contextlib.suppress(OSError):  # (under a pipe's buffer: the write never blocks)
            os.write(w, " ".join(sorted(set(sys.modules) - before)).encode()[:60_000])
        os._exit(0)
    os.close(w)
    found, deadline = b"", time.monotonic() + REHEARSAL_S
    while select.select([r], [], [], max(0.0, deadline - time.monotonic()))[0]:
        chunk = os.read(r, 1 << 16)
        if not chunk:
            break
        found += chunk
    os.close(r)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    for name in found.decode().split():
        with contextlib.suppress(Exception, SystemExit):
            importlib.import_module(name)


def _unfit() -> str | None:
    """Why this process cannot fork instances, if it cannot: a thread is running (a fork carries one: locks another
    one holds would stay held), or a process it started is (it would live as long as the zygote, beside every
    trajectory's instances, uncapped, each sharing it; a spawned instance has its own). Exited ones are reaped."""
    import threading

    if threading.active_count() > 1:
        return "a module this server imports starts a thread when imported"
    if iso.reap_exited():
        return "this server starts a process when imported, and it is still running"
    return None


def _run_server(entry: list[str], main: object | None) -> None:
    """The instance's server process: the entry module as ``__main__`` (``main``: only its ``__main__`` block, the
    rest ran in the zygote), then the interpreter's exit."""
    import runpy
    import traceback

    code = 0
    try:
        if main is not None:
            exec(main, sys.modules["__main__"].__dict__)  # noqa: S102
        elif entry[0] == "-m":
            sys.argv = [entry[1], *entry[2:]]  # runpy puts the module's file in argv[0], as ``python -m`` does
            runpy.run_module(entry[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(entry)
            runpy.run_path(entry[0], run_name="__main__")
    except SystemExit as e:
        code = zygote.exit_status(e.code)
    except BaseException:  # noqa: BLE001 - an uncaught exception: its traceback, status 1
        traceback.print_exc()
        code = 1
    try:
        zygote.finish_like_python()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _instance(spec: dict, fds: list[int], entry: list[str], own: list, run: Callable, main: object) -> None:
    """In the forked child: the client's pipes as 0, 1 and 2, nothing of the zygote's, then contained."""
    import contextlib
    import traceback

    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    zygote.place(dict(enumerate(fds)))
    for fd in {*fds, *(x if isinstance(x, int) else x.fileno() for x in own)}:
        with contextlib.suppress(OSError):
            os.close(fd)
    # as a spawned server's interpreter has it: the zygote's own -B (start.command) is not the server's
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    code = 1
    try:
        iso.prctl(iso.PR_SET_PDEATHSIG, signal.SIGKILL)  # the zygote's child: dies with it, as it dies with the client
        os.setsid()
        code = run({**spec, "in_userns": True}, lambda: _run_server(entry, main))
    except BaseException:  # noqa: BLE001 - as the spawned launcher: a traceback on stderr
        traceback.print_exc()
    finally:
        sys.stderr.flush()
        os._exit(code)


def _outside(pid: int) -> None:
    """The client's child, outside the zygote's PID namespace: killed, it takes the zygote and so the whole
    namespace with it (the zygote's parent-death signal); signalled (its client died: its parent-death signal),
    it kills the zygote, and then removes what the instances, killed with it, could not (``launcher.sweep``).
    Otherwise it ends with the zygote's status."""
    code = zygote.wait_init(pid)
    launcher.sweep()
    os._exit(code if code >= 0 else 128 - code)


def serve(control_fd: int, client: int, spec: dict, entry: list[str]) -> None:
    import contextlib
    import gc
    import selectors

    iso.prctl(iso.PR_SET_PDEATHSIG, signal.SIGTERM)  # (to _outside, below)
    if os.getppid() != client:  # the client died before the line above
        return
    flags = iso.CLONE_NEWNS | iso.CLONE_NEWPID | iso.CLONE_NEWIPC
    if not spec.get("network", True):  # the server's body runs here: no network, as a spawned instance has none
        flags |= iso.CLONE_NEWNET
    userns = iso.enter_namespaces(flags)
    init = zygote.fork_init()  # PID 1 of the new namespace: what the server's body starts there dies with it
    if init:
        _outside(init)
    launcher._contain(spec, userns)  # the host read-only to what the imports do: only the instances may write
    iso.install_seccomp(programs=False)  # the server's body runs here: no keyrings (not namespaced)
    # and for good: copied into a user namespace's mount namespace, read-only mounts stay read-only (the kernel
    # locks them), or the server's body, run here with our capabilities, could remount the host writable
    iso.enter_namespaces(iso.CLONE_NEWNS, user=True)
    run = launcher.run
    zygote.forget()  # the server's code finds none of ours by name (nor its own package of our name shadowed)
    _server_path(entry)
    sys.dont_write_bytecode = True  # (the host is read-only here)
    try:
        path, tree, init = _entry(entry)
    except (Exception, SystemExit):  # noqa: BLE001 - an unreadable entry fails in each instance, as spawned
        path = None
    main = None
    if path is not None:
        _preload(tree, init["__package__"] or "")
        argv = [path, *entry[2:]] if entry[0] == "-m" else list(entry)  # as python sets it
        main = _prepare(path, tree, init, argv)
    unfit = _unfit()  # what the server imports, or its body, started
    if main is not None and unfit is None and spec.get("rehearse", True):
        _rehearse(main, [control_fd])
    if why := unfit or _unfit():
        print(f"trajkit: {why}", file=sys.stderr, flush=True)
        os._exit(UNFIT if unfit else REHEARSED_UNFIT)
    gc.collect()
    gc.freeze()  # what the instances inherit is never scanned (nor so copied) by their collector
    control = socket.socket(fileno=control_fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    sel = selectors.DefaultSelector()
    sel.register(control, selectors.EVENT_READ, "new")
    sel.register(wake_r, selectors.EVENT_READ, "reap")
    instances: dict[int, socket.socket] = {}
    while True:
        for key, _ in sel.select():
            if key.data == "new":
                fds = socket.recv_fds(control, 16, 1)[1]
                if not fds:  # the client is gone (its parent-death signal is on its way)
                    os._exit(0)
                sel.register(socket.socket(fileno=fds[0]), selectors.EVENT_READ, "request")
            elif key.data == "reap":
                os.read(wake_r, 4096)
                _reap(sel, instances)
            elif key.data == "request":
                conn = key.fileobj
                sel.unregister(conn)
                own = [wake_w, sel.fileno(), *(k.fd for k in sel.get_map().values()), *instances.values()]
                pid = _fork(conn, own, lambda spec, fds, own: _instance(spec, fds, entry, own, run, main))
                if pid is not None:
                    instances[pid] = conn
                    sel.register(conn, selectors.EVENT_READ, pid)
            else:  # from the client: "term", or its end (it closed the instance, or died): SIGKILL
                try:
                    word = key.fileobj.recv(64)
                except OSError:
                    word = b""
                if word != b"term":
                    sel.unregister(key.fileobj)
                with contextlib.suppress(ProcessLookupError):  # (not reaped yet: the pid is still the instance's)
                    os.kill(key.data, signal.SIGTERM if word == b"term" else signal.SIGKILL)


def _fork(conn: socket.socket, own: list, instance: Callable) -> int | None:
    """Fork one instance (``instance(spec, fds, own)`` in the child) for the request on ``conn``; its pid, or
    None (a bad request, closed)."""
    import json

    try:
        msg, fds, _, _ = socket.recv_fds(conn, MAX_SPEC, 3)
    except OSError:
        msg, fds = b"", []
    if len(fds) != 3 or not msg:
        for fd in fds:
            os.close(fd)
        conn.close()
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        instance(json.loads(msg), fds, [*own, conn])
    for fd in fds:
        os.close(fd)
    try:
        conn.send(f"pid {pid}".encode())
    except OSError:
        os.kill(pid, signal.SIGKILL)
    return pid


def _reap(sel: object, instances: dict[int, socket.socket]) -> None:
    """Collect exited instances; tell each one's client its status."""
    import contextlib

    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = instances.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.send(f"exit {os.waitstatus_to_exitcode(status)}".encode())
            with contextlib.suppress(KeyError, ValueError):
                sel.unregister(conn)
            conn.close()


if __name__ == "__main__":
    import json

    cut = sys.argv.index("--")
    serve(int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4]), sys.argv[cut + 1 :])
