"""Where the SQL box's queries run: in a process that cannot write anything, one process per query.

A helper process (``python -m trajkit.view.sqlbox``) confines itself with Landlock
before it imports anything that starts a thread: from then on it and every process it
starts can create, write, rename or remove no file anywhere (the run included), and, as
far as the kernel's Landlock goes (ABI 3, 4, 6), truncate none, open no TCP connection
and send no signal to a process outside it. It then imports DuckDB and pyarrow and forks
one child per query. The child opens the run's views from a DuckDB file the viewer wrote
outside the run, read-only (no CREATE, DROP, ALTER or INSERT there), limits file access
to the run, turns extension installs and loads off, locks the configuration, runs the
query and sends back Arrow IPC; whatever the statement changed in its own session ends
with it. A query still running at its deadline is killed.

Messages on the pipes are frames: four bytes of length (big-endian), then the bytes.
A request is JSON (``views``, ``root``, ``sql``, ``timeout``, ``memory_limit``);
an answer is JSON (``error`` and ``io``: the error was DuckDB's IOException, a shard
vanished) then, without an error, the result as an Arrow IPC stream.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from typing import Any

from trajkit.sqlread import confine, lock

_PR_SET_PDEATHSIG = 1
START_TIMEOUT_S = 60.0  # the helper's imports on a loaded machine
MARGIN_S = 30.0  # beyond a query's deadline before the viewer gives up on the helper itself


class Unavailable(RuntimeError):
    """The SQL box cannot run queries: the machine cannot confine its process, or the process ended."""


# ------------------------------------------------------------------ frames
def _frame(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _send(fd: int, data: bytes) -> None:
    _write(fd, _frame(data))


def _error(message: str, io: bool = False) -> bytes:
    return json.dumps({"error": message, "io": io}).encode()


def _read(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, left = [], n
    while left:
        if deadline is not None and not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            raise TimeoutError
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _receive(fd: int, deadline: float | None = None) -> bytes:
    (n,) = struct.unpack(">I", _read(fd, 4, deadline))
    return _read(fd, n, deadline)


# ------------------------------------------------------------------ the helper process
def _answer(request: dict[str, Any], out: int) -> None:
    """In the child: run the request's query on the views, read-only; write the answer frames to ``out``."""
    import duckdb
    import pyarrow as pa

    try:
        con = duckdb.connect(request["views"], read_only=True, config={"autoload_known_extensions": False})
        lock(con, folders=[request["root"]], memory_limit=request["memory_limit"])
        relation = con.sql(request["sql"])
        table = relation.to_arrow_table() if relation is not None else pa.table({})
    except duckdb.Error as e:
        _send(out, _error(str(e).splitlines()[0], isinstance(e, duckdb.IOException)))
        return
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    _send(out, json.dumps({"error": None}).encode())
    _send(out, sink.getvalue().to_pybytes())


def _run_child(request: dict[str, Any]) -> bytes:
    """Fork a child for one request; its answer frames, or an error frame when it failed or ran past the deadline."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: dies with the helper; exits without running the helper's exit handlers
        code = 1
        try:
            os.close(r)
            ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            _answer(request, w)
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    deadline = time.monotonic() + request["timeout"]
    chunks = []
    try:
        while chunk := _read_some(r, deadline):
            chunks.append(chunk)
    except TimeoutError:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return _frame(_error(f"query stopped after {request['timeout']:.0f} s"))
    finally:
        os.close(r)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if status != 0:
        return _frame(_error(f"the query's process ended with status {status}"))
    return b"".join(chunks)


def _read_some(fd: int, deadline: float) -> bytes:
    if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
        raise TimeoutError
    return os.read(fd, 1 << 20)


def serve() -> None:
    """The helper: confine, import, say ready, then answer each request on stdin until it closes."""
    channel = os.dup(1)
    os.dup2(2, 1)  # anything printed goes to stderr, never into the answers
    try:
        abi = confine()
    except OSError as e:
        _send(channel, _error(f"this machine cannot confine the SQL box's process ({e})"))
        return
    import duckdb  # noqa: F401  (imported once here, so that each child starts at once)
    import pyarrow.ipc  # noqa: F401

    _send(channel, json.dumps({"error": None, "landlock": abi}).encode())
    while True:
        try:
            request = json.loads(_receive(0))
        except EOFError:
            return
        _write(channel, _run_child(request))


# ------------------------------------------------------------------ the viewer's side
class SqlBox:
    """The viewer's handle on the helper process (``command``; this module by default): started at the
    first query, again if it ended; one query at a time."""

    def __init__(self, command: list[str] | None = None):
        self.command = command or [sys.executable, "-m", "trajkit.view.sqlbox"]
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._refused: str | None = None  # why the machine cannot confine it, once known

    def run(self, views: str, root: str, sql: str, timeout: float, memory_limit: str) -> tuple[Any, str | None, bool]:
        """(the result as a pyarrow Table or None, DuckDB's error or None, whether the error was an IOException)."""
        import pyarrow as pa

        request = {"views": views, "root": root, "sql": sql, "timeout": timeout, "memory_limit": memory_limit}
        with self._lock:
            proc = self._started()
            try:
                _send(proc.stdin.fileno(), json.dumps(request).encode())
                deadline = time.monotonic() + timeout + MARGIN_S
                header = json.loads(_receive(proc.stdout.fileno(), deadline))
                if header["error"] is not None:
                    return None, header["error"], header["io"]
                body = _receive(proc.stdout.fileno(), deadline)
            except (OSError, EOFError, TimeoutError, ValueError) as e:
                self._stop()
                raise Unavailable(f"the SQL box's process stopped answering ({type(e).__name__})") from None
        return pa.ipc.open_stream(body).read_all(), None, False

    def _started(self) -> subprocess.Popen:
        if self._refused is not None:
            raise Unavailable(self._refused)
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        proc = subprocess.Popen(  # its own session: Ctrl-C in the viewer's terminal is the viewer's
            self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, start_new_session=True
        )
        try:
            ready = json.loads(_receive(proc.stdout.fileno(), time.monotonic() + START_TIMEOUT_S))
        except (EOFError, TimeoutError, ValueError):
            _end(proc)
            raise Unavailable("the SQL box's process did not start") from None
        if ready["error"] is not None:
            _end(proc)
            self._refused = ready["error"]
            raise Unavailable(self._refused)
        self._proc = proc
        return proc

    def _stop(self) -> None:
        if self._proc is not None:
            _end(self._proc)
            self._proc = None

    def close(self) -> None:
        """End the helper (closing its stdin ends it once its query is done)."""
        with self._lock:
            if self._proc is not None:
                self._proc.stdin.close()
                try:
                    self._proc.wait(5)
                except subprocess.TimeoutExpired:
                    self._stop()
                self._proc = None


def _end(proc: subprocess.Popen) -> None:
    """Kill the helper (its children die with it), wait for it, close its pipes."""
    proc.kill()
    with proc:
        pass


BOX = SqlBox()  # one helper per viewer process, whatever the runs it serves
atexit.register(BOX.close)

if __name__ == "__main__":
    serve()
