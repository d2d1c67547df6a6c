"""Run one Python program in the current, already confined process, and report how it ended.

This file is imported by the sandbox worker (``worker.py``), which runs as a
plain script in a fresh interpreter, so it uses the standard library only.
The program runs like ``python program.py``: as ``__main__``, with its
non-daemon threads joined and its ``atexit`` handlers run. How it ended goes
to the status descriptor as one JSON line carrying the run's nonce:
``finished`` is true only when the last statement ran without raising, so a
program that calls ``sys.exit(0)`` or ``os._exit(0)`` before its tests ran is
never mistaken for one whose tests passed.
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


def _stream(fd: int, mode: str) -> io.TextIOWrapper:
    raw = io.FileIO(fd, mode, closefd=False)
    if mode == "r":
        return io.TextIOWrapper(io.BufferedReader(raw), encoding="utf-8", errors="replace")
    return io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8", errors="backslashreplace")


def _is_memory_error(exc: BaseException) -> bool:
    return isinstance(exc, MemoryError) or (isinstance(exc, OSError) and exc.errno == errno.ENOMEM)


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(Exception):
        print(code, file=sys.stderr)
    return 1


def _finish_like_python() -> None:
    """Join non-daemon threads and run atexit handlers, as the interpreter does at exit."""
    threading = sys.modules.get("threading")
    if threading is not None:
        for thread in threading.enumerate():
            if thread is not threading.main_thread() and not thread.daemon:
                thread.join()
    import atexit

    if atexit._ncallbacks():
        atexit._run_exitfuncs()


def execute(program: str, status_fd: int, nonce: str) -> None:
    """Run ``program`` on fds 0/1/2, write the status line to ``status_fd``, and ``_exit``."""
    sys.stdin, sys.stdout, sys.stderr = _stream(0, "r"), _stream(1, "w"), _stream(2, "w")
    sys.argv = ["<program>"]
    status: dict = {"nonce": nonce, "finished": False, "exception": None, "memory": False, "exit_code": 0}
    main = types.ModuleType("__main__")
    main.__file__ = "<program>"
    main.__builtins__ = builtins
    sys.modules["__main__"] = main  # pickling and `import __main__` see the program, as under `python program.py`
    scope = main.__dict__
    try:
        exec(compile(program, "<program>", "exec"), scope)  # noqa: S102 - running it is the point
        _finish_like_python()
        status["finished"] = True
    except SystemExit as exc:
        status["exit_code"] = _exit_code(exc)
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
