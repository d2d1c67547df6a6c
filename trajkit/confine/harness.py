"""Run one Python program in the current, already confined process, and report how it ended.

This file is imported by the sandbox worker (``worker.py``), which runs in a
fresh interpreter from a folder holding only this package: standard library only.
The program runs like ``python program.py``: as ``__main__``, with its
non-daemon threads joined and its ``atexit`` handlers run. How it ended goes
to the status descriptor as one JSON line carrying the run's nonce:
``finished`` is true only when the last statement ran without raising, so a
program that calls ``sys.exit(0)`` or ``os._exit(0)`` before its tests ran is
never mistaken for one whose tests passed.

A unit-test run is two such processes (``program_zygote.py`` forks both): the
solution's, which runs the program and then ``serve``s calls to its
functions, and the tests', which runs the trusted test code with each of the
solution's functions replaced by stand-ins that call into its process. What crosses
between them (``crossing.py``) becomes exact built-in values or handles to
the solution's objects, so no ``__eq__``, hook, thread or finalizer of the
solution ever runs where the verdict is decided.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import io
import json
import os
import sys
import traceback
import types

from . import crossing, zygote


def _stream(fd: int, mode: str) -> io.TextIOWrapper:
    raw = io.FileIO(fd, mode, closefd=False)
    if mode == "r":
        return io.TextIOWrapper(io.BufferedReader(raw), encoding="utf-8", errors="replace")
    return io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8", errors="backslashreplace")


def _is_memory_error(exc: BaseException) -> bool:
    return isinstance(exc, MemoryError) or (isinstance(exc, OSError) and exc.errno == errno.ENOMEM)


def _main_scope() -> dict:
    sys.stdin, sys.stdout, sys.stderr = _stream(0, "r"), _stream(1, "w"), _stream(2, "w")
    sys.argv = ["<program>"]
    main = types.ModuleType("__main__")
    main.__file__ = "<program>"
    main.__builtins__ = builtins
    sys.modules["__main__"] = main  # pickling and `import __main__` see the program, as under `python program.py`
    return main.__dict__


def execute(program: str, status_fd: int, nonce: str, given=None) -> None:
    """Run ``program`` on fds 0/1/2, write the status line to ``status_fd``, and ``_exit``.

    ``given`` (a callable returning names to define first, e.g. ``remote_functions``) runs as part
    of the program: if it raises, the program failed.
    """
    scope = _main_scope()
    status: dict = {"nonce": nonce, "finished": False, "exception": None, "memory": False, "exit_code": 0}
    try:
        if given is not None:
            scope.update(given())
        exec(compile(program, "<program>", "exec"), scope)  # noqa: S102 - running it is the point
        zygote.finish_like_python()
        status["finished"] = True
    except SystemExit as exc:
        status["exit_code"] = zygote.exit_status(exc.code)
        status["exception"] = f"SystemExit: {exc.code}"
    except BaseException as exc:  # noqa: BLE001 - the program's own failure, reported as the interpreter would
        scope.clear()  # free what a memory bomb held before formatting anything
        status["exit_code"] = 1
        status["memory"] = _is_memory_error(exc)
        status["exception"] = type(exc).__name__
        with contextlib.suppress(BaseException):  # a hostile __str__ must not stop the report
            status["exception"] = f"{type(exc).__name__}: {exc}"[:500]
            traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next if exc.__traceback__ else None)
    scope.clear()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    with contextlib.suppress(BaseException):
        os.write(status_fd, (json.dumps(status) + "\n").encode())
    os._exit(status["exit_code"])


def serve(program: str, call_fd: int, reply_fd: int) -> None:
    """The solution's side: run ``program`` as ``__main__``, then answer calls to its names until EOF."""
    scope = _main_scope()
    ready: dict = {"ready": True}
    try:
        exec(compile(program, "<program>", "exec"), scope)  # noqa: S102 - running it is the point
    except BaseException as exc:  # noqa: BLE001 - the tests' side fails without running a test
        ready = {"ready": False, "memory": False, "exception": "an exception"}
        with contextlib.suppress(BaseException):
            ready = {"ready": False, "memory": _is_memory_error(exc), "exception": str(type(exc).__name__)}
            ready["exception"] = f"{type(exc).__name__}: {exc}"[:500]
        with contextlib.suppress(BaseException):
            traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next if exc.__traceback__ else None)
    if ready["ready"]:
        with contextlib.suppress(BaseException):  # an odd class is then a plain name to the tests
            ready["classes"] = crossing.describe_classes(scope)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    crossing.write_frame(reply_fd, json.dumps(ready).encode())
    if not ready["ready"]:
        os._exit(1)
    crossing.Exports(scope, call_fd, reply_fd).serve()
    os._exit(0)


def remote_functions(names: list[str], call_fd: int, reply_fd: int) -> dict:
    """The tests' side: once the solution's program has run to its end, a stand-in per name that calls the
    solution's function or stands for its class (``crossing.Channel.stand_ins``). Raises if the solution's
    program did not end normally."""
    body = crossing.read_frame(reply_fd, crossing.MAX_READY_BYTES)
    ready = json.loads(body) if body is not None else None
    if type(ready) is not dict or ready.get("ready") is not True:
        if type(ready) is dict and ready.get("memory") is True:
            raise MemoryError("the solution ran out of memory")
        why = str(ready.get("exception"))[:500] if type(ready) is dict else "it exited"
        raise RuntimeError(f"the solution's program did not run to its end ({why})")
    return crossing.Channel(call_fd, reply_fd).stand_ins(names, ready.get("classes"))
