"""The stdio transport of a server process, spawned (``spawn``) or forked from its zygote (``forks.py``).

The MCP session's streams over the process's stdin and stdout (``Streams``): one message a line, of at most
``MAX_LINE`` by default (a server's ``max_message_mib`` sets its own; a longer one ends the session, the server's
fault, ``line_too_long``; the SDK's own stdio client reads lines of any length). The cap bounds what one message
holds the client's event loop: its parse and validation (about 10-20 ms a MiB, the loop's one thread and every
trajectory of the process waiting) run in one go; a line over it costs reads in chunks and is dropped. Its stderr a pipe whose tail the client keeps for fault reasons (``Stderr``: nothing on disk); and its
end as the SDK's stdio client ends a server: stdin closed, ``STOP_S`` for it to exit, SIGTERM, ``STOP_S``, SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from typing import Any

from trajkit.envs.config import ServerConfig, child_environment

STOP_S = 2.0  # as the SDK's stdio client: the wait for the exit after stdin closes, and after SIGTERM
FLUSH_S = 0.5  # and for the last message to be written
MAX_LINE = 4 << 20  # one JSON-RPC message from a server, by default (a few screenshots of MAX_MEDIA_BYTES)
STDERR_TAIL_CHARS = 300


class Stderr:
    """A server's stderr: a pipe (``fileno``, the end it writes) whose last ``KEEP`` bytes the client keeps for
    fault reasons (``tail``), read as they come. Nothing goes to disk: a server that writes stderr forever costs
    reads, not space."""

    KEEP = 4 * STDERR_TAIL_CHARS

    def __init__(self) -> None:
        self.kept = b""
        self.notes: list[str] = []
        self.code: str | None = None  # a ``schema.REASON_CODES`` value the client's own note gave the fault
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._r, self._read)

    def _read(self, chunks: int = 1) -> None:
        for _ in range(chunks):
            try:
                chunk = os.read(self._r, 1 << 18)
            except BlockingIOError:
                return
            if not chunk:
                self._loop.remove_reader(self._r)
                return
            self.kept = (self.kept + chunk[-self.KEEP :])[-self.KEEP :]

    def note(self, text: str, code: str | None = None) -> None:
        """A line of the client's own about the server: the tail ends with it, whatever the server wrote after;
        ``code``: the reason code of the fault it explains (else the fault's own)."""
        self.notes.append(text)
        self.code = code or self.code

    def fileno(self) -> int:
        return self._w

    def tail(self) -> str:
        """`` (stderr: ...)`` with the last line(s) written, those not yet read included; or ``""``."""
        self._read(16)  # (a flood: up to a bound)
        text = self.kept.decode(errors="replace")
        tail = " | ".join(line.strip() for line in text.splitlines() if line.strip())[-STDERR_TAIL_CHARS:]
        tail = " | ".join(filter(None, [tail, *self.notes]))
        return f" (stderr: {tail})" if tail else ""

    def close(self) -> None:
        self._loop.remove_reader(self._r)
        os.close(self._r)
        os.close(self._w)


class Streams:
    """The MCP session's streams over a server process's stdin and stdout, and its end; ``process``: its status and
    signals (``Spawned``, or a forked one's: ``forks.Forked``); ``max_line``: the longest message read, in bytes."""

    def __init__(self, process: Any, stdin: int, stdout: int, errlog: Stderr, max_line: int):
        import anyio

        self.loop, self.process, self.errlog, self.max_line = asyncio.get_running_loop(), process, errlog, max_line
        self._stdin, self._stdout = os.fdopen(stdin, "wb", 0), os.fdopen(stdout, "rb", 0)
        self.to_session, self.read = anyio.create_memory_object_stream(0)
        self.write, self.from_session = anyio.create_memory_object_stream(0)
        self.status: asyncio.Future[int | None] = self.loop.create_future()  # None: a zygote that went first
        self._tasks: list[asyncio.Task] = []

    async def __aenter__(self) -> tuple[Any, Any]:
        self._tasks = [asyncio.create_task(c) for c in (self._watch(), self._reader(), self._writer())]
        return self.read, self.write

    async def __aexit__(self, *exc: object) -> None:
        import anyio

        with anyio.CancelScope(shield=True):
            self.read.close()
            self.write.close()
            await asyncio.wait([self._tasks[2]], timeout=FLUSH_S)  # what the session sent last, flushed; then its
            self._tasks[2].cancel()  # stdin is closed (the writer's last act): the MCP way to end a stdio server
            for end in (self.process.term, self.process.kill):  # then SIGTERM, then SIGKILL
                await asyncio.wait([self.status], timeout=STOP_S)
                if self.status.done():
                    break
                end()
            await asyncio.wait([self.status], timeout=STOP_S)  # (killed: reaped)
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            self._stdin.close()  # (where a pipe's transport never took it)
            self._stdout.close()

    async def _watch(self) -> None:
        self.status.set_result(await self.process.status())

    async def _reader(self) -> None:
        import anyio
        from mcp.shared.message import SessionMessage
        from mcp_types import jsonrpc_message_adapter

        reader = asyncio.StreamReader(limit=self.max_line)
        transport, _ = await self.loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), self._stdout)
        try:
            async with self.to_session:
                while True:
                    try:
                        line = await reader.readline()
                    except ValueError:  # over the cap (not kept): the server's fault, and the end of its session
                        cap = f"{self.max_line / (1 << 20):g} MiB (max_message_mib)"
                        self.errlog.note(f"trajkit: a message from this server was over {cap}", "line_too_long")
                        return
                    if not line:
                        break
                    text = line.decode(errors="replace").removesuffix("\n")
                    try:
                        message = SessionMessage(jsonrpc_message_adapter.validate_json(text, by_name=False))
                    except ValueError as e:  # not JSON-RPC: the session's message handler records the line
                        message = e
                    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                        await self.to_session.send(message)  # (the session gone: what is left is drained, so
                        # a server writing on its way out never blocks on a full pipe)
                await asyncio.wait([self.status], timeout=1)  # the instance is gone: with its zygote?
                if self.status.done() and self.status.result() is None:
                    self.errlog.note("trajkit: the fork server exited, and this server with it")
        finally:
            transport.close()

    async def _writer(self) -> None:
        transport, protocol = await self.loop.connect_write_pipe(asyncio.streams.FlowControlMixin, self._stdin)
        writer = asyncio.StreamWriter(transport, protocol, None, self.loop)
        try:
            async with self.from_session:
                async for message in self.from_session:
                    writer.write(message.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n")
                    await writer.drain()
        except Exception:  # noqa: BLE001 - the instance closed its stdin (gone): the session hears of it once
            await asyncio.wait([self._tasks[1]], timeout=1)  # the reader has its reason on errlog
            self.to_session.close()
        finally:
            transport.close()


class Spawned:
    """A spawned server's status, and its signals: to its process group (a session of its own), as the SDK does."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc

    async def status(self) -> int:
        loop = asyncio.get_running_loop()
        exited = loop.create_future()
        pidfd = os.pidfd_open(self.proc.pid)
        loop.add_reader(pidfd, lambda: exited.done() or exited.set_result(None))
        try:
            await exited
        finally:
            loop.remove_reader(pidfd)
            os.close(pidfd)
        return self.proc.wait()

    def term(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)


@contextlib.asynccontextmanager
async def spawn(
    argv: list[str], env: dict[str, str], cwd: str | None, errlog: Stderr, max_line: int
) -> AsyncIterator[tuple[Any, Any]]:
    """A server process started from ``argv``, its stderr written to ``errlog``: the (read, write) streams of an MCP
    session over its stdin and stdout (``Streams``, messages of at most ``max_line`` bytes). OSError when it cannot
    start."""
    stdin, stdout = os.pipe(), os.pipe()
    try:
        proc = subprocess.Popen(  # noqa: ASYNC220 - (asyncio's subprocess_exec forks in the loop too)
            argv, stdin=stdin[0], stdout=stdout[1], stderr=errlog, env=env, cwd=cwd, start_new_session=True
        )
    except BaseException:
        os.close(stdin[1])
        os.close(stdout[0])
        raise
    finally:
        os.close(stdin[0])
        os.close(stdout[1])
    async with Streams(Spawned(proc), stdin[1], stdout[0], errlog, max_line) as streams:
        yield streams


def environment(cfg: ServerConfig) -> dict[str, str]:
    """The environment a server process gets: the MCP SDK's safe defaults, then ``child_environment``."""
    from mcp.client.stdio import get_default_environment

    return get_default_environment() | child_environment(cfg)
