"""Fresh contained instances of a Python stdio server forked from a zygote instead of spawned.

A spawned instance of a Python server pays its interpreter's start and every import (about a
CPU-second for an ``mcp`` server); forked from a process that made those imports once
(``zygote.py``), it pays a fork and the containment (docs/sandbox.md has the numbers). A server
qualifies when its ``command`` is a Python interpreter (``python``, ``python3.12``, a venv's
``.../bin/python``) running ``-m MODULE`` or a ``.py`` script, with nothing else before them, and uses
no ``${SESSION_DIR}``; ``uvx``, ``uv run``, console scripts and node servers are spawned, as are
stateless servers' shared instances and harvest's start. A server whose entry has ``fork: false``
in the servers config is spawned too, and every server under ``--keep-env-state`` (an instance's layers
bound from a host folder: the zygote's read-only host, locked, could not let them through).

The zygote sees the host read-only (as a stateless server does): a module that writes when imported
fails there and is imported by each instance, in its own overlays. It imports what the entry module
imports and, where the entry ends with an ``if __name__ == "__main__":`` block, runs the rest of it
once, with the server's ``sys.argv``; each instance then runs only that block. So what the server
creates at import (its tool registry, a module-level dict) is made once and copied into every
instance as it was then: memory is private after the fork, so nothing one instance does reaches
another, and each starts from the same fresh state a spawned one would (``random`` is reseeded; a
thread started at import would not survive a fork, so such a module runs whole in each instance).
A zygote that dies is started again (its running instances die with it: their trajectories fail
with the reason); after ``MAX_RESTARTS`` its server's instances are spawned. Either way a warning
names the reason, and a start that found no zygote spawns its instance.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from trajkit.envs import contain
from trajkit.envs.config import ServerConfig, child_environment, resolve_command
from trajkit.envs.zygote import REHEARSED_THREAD, THREADED

if TYPE_CHECKING:
    from trajkit.envs.session import Stderr

ZYGOTE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zygote.py")
PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
MAX_RESTARTS = 2
STOP_S = 2.0  # as the SDK's stdio client: the wait for the exit after stdin closes, and after SIGTERM
FLUSH_S = 0.5  # and for the last message to be written
MAX_LINE = 32 << 20  # one JSON-RPC message from a server (a result with a few screenshots is a few MiB)
log = logging.getLogger(__name__)


def python_entry(cfg: ServerConfig) -> list[str] | None:
    """``[-m, MODULE, ARGS...]`` or ``[SCRIPT, ARGS...]`` of a server that qualifies for forking, else None."""
    if not cfg.fork or cfg.transport != "stdio" or cfg.uses_session_dir or os.environ.get(contain.ENV_KEEP):
        return None
    if not PYTHON.fullmatch(os.path.basename(resolve_command(cfg.command))):
        return None
    args = list(cfg.args)
    if len(args) >= 2 and args[0] == "-m" and MODULE.fullmatch(args[1]):
        return args
    if args and args[0].endswith(".py") and not args[0].startswith("-"):
        return args
    return None


class Zygote:
    """The zygote of one server, started on the first instance and kept until ``close``."""

    def __init__(self, name: str, cfg: ServerConfig):
        self.name, self.cfg = name, cfg
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self.gone: str | None = None  # why its instances are spawned from now on
        self.rehearse = True  # the zygote imports what a rehearsal start imported (zygote._rehearse)
        self._control: socket.socket | None = None  # ours of the socket pair the zygote takes requests on
        self._log = None

    @contextlib.asynccontextmanager
    async def instance(
        self, launcher: list[str], errlog: Stderr, timeout_s: float = 60.0
    ) -> AsyncIterator[tuple[Any, Any]]:
        """One instance forked from the zygote, contained as ``launcher`` (``contain.wrap``'s arguments) says,
        its stderr written to ``errlog``: the (read, write) streams of an MCP session over its stdin and stdout,
        as the SDK's ``stdio_client`` gives for a spawned server (no process is spawned for it). On the way out
        as there: stdin closed, ``STOP_S`` for it to exit, SIGTERM, ``STOP_S``, SIGKILL. An instance whose
        zygote died says so on ``errlog``. ``NotForked`` (before anything started) when there is no zygote to
        ask (given up, or dead since it was checked), or it did not answer in ``timeout_s`` (alive but wedged, by a
        server's body, say: it is killed, and started again next time): the caller spawns the instance."""
        if not self._running():
            raise NotForked(self.gone)
        loop = asyncio.get_running_loop()
        sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # the instance's, theirs the zygote's
        sock.setblocking(False)
        stdin, stdout = os.pipe(), os.pipe()
        reply = b""
        try:
            async with asyncio.timeout(timeout_s):
                with theirs:  # (closed once sent, or a zygote that died with it in its queue would leave no EOF)
                    socket.send_fds(self._control, [b"new"], [theirs.fileno()])  # no path: nothing to reach, or left
                spec = launcher[launcher.index("--") - 1]
                socket.send_fds(sock, [spec.encode()], [stdin[0], stdout[1], errlog.fileno()])
                reply = await loop.sock_recv(sock, 64)
        except TimeoutError:
            log.warning("fork server of %r did not answer in %gs; killed", self.name, timeout_s)
            self.proc.kill()  # (the zygote with it: its parent-death signal)
        except OSError:
            pass
        finally:  # the instance's ends are its own now; ours all go unless it was forked (cancelled too: the
            os.close(stdin[0])  # zygote kills an instance whose socket closes)
            os.close(stdout[1])
            if not reply.startswith(b"pid "):
                sock.close()
                os.close(stdin[1])
                os.close(stdout[0])
        if not reply.startswith(b"pid "):
            raise NotForked("the fork server did not answer")
        async with _Streams(loop, sock, stdin[1], stdout[0], errlog) as streams:
            yield streams

    def _running(self) -> bool:
        if self.gone is not None:
            return False
        if self.proc is not None:
            if self.proc.poll() is None:
                return True
            code, reason = self.proc.returncode, f"exited with status {self.proc.returncode}{self._tail()}"
            self.close()
            if code == REHEARSED_THREAD:  # what its rehearsal imported started a thread: again, without
                self.rehearse = False
            elif code == THREADED or self.restarts >= MAX_RESTARTS:
                self.gone = reason
                log.warning("fork server of %r %s; its instances are spawned from now on", self.name, reason)
                return False
            else:
                self.restarts += 1
                log.warning("fork server of %r %s; started again", self.name, reason)
        self._start()
        return True

    def _start(self) -> None:
        cfg = self.cfg.resolved()
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._control.setblocking(False)  # (a zygote whose queue is full is one that does not answer)
        with theirs:
            spec = {
                "writable": [],
                "disk_mb": 1,
                "keep": None,
                "rehearse": self.rehearse,
                "network": cfg.network,
            }
            fd, spec = str(theirs.fileno()), json.dumps(spec)
            self.proc = subprocess.Popen(
                [resolve_command(cfg.command), ZYGOTE, "serve", fd, str(os.getpid()), spec, "--", *cfg.args],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._log,
                env=_environment(cfg),
                cwd=cfg.cwd,
                start_new_session=True,
            )

    def _tail(self) -> str:
        self._log.seek(0)
        tail = self._log.read()[-300:].decode(errors="replace").strip().replace("\n", " | ")
        return f" (stderr: {tail})" if tail else ""

    def close(self) -> None:
        """Kill the zygote and its process group (its instances, if any are left, die with it)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):  # its group: what the server's body started at import too
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._control is not None:
            self._control.close()
            self._control = None


class NotForked(Exception):
    """No zygote forked the instance (nothing started): it is spawned instead."""


class _Streams:
    """The MCP session's streams over a forked instance's pipes, and its shutdown (``Zygote.instance``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, stdin: int, stdout: int, errlog: Stderr):
        import anyio

        self.loop, self.sock, self.errlog = loop, sock, errlog
        self._stdin, self._stdout = os.fdopen(stdin, "wb", 0), os.fdopen(stdout, "rb", 0)
        self.to_session, self.read = anyio.create_memory_object_stream(0)
        self.write, self.from_session = anyio.create_memory_object_stream(0)
        self.status: asyncio.Future[int | None] = loop.create_future()  # None: the zygote went first
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
            for word in (b"term", None):  # then SIGTERM, then SIGKILL (the zygote kills it when we hang up)
                await asyncio.wait([self.status], timeout=STOP_S)
                if self.status.done() or word is None:
                    break
                with contextlib.suppress(OSError):
                    self.sock.send(word)
            self.sock.close()
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            self._stdin.close()  # (where a pipe's transport never took it)
            self._stdout.close()

    async def _watch(self) -> None:
        try:
            word = await self.loop.sock_recv(self.sock, 64)
        except OSError:
            word = b""
        self.status.set_result(int(word.split()[1]) if word.startswith(b"exit ") else None)

    async def _reader(self) -> None:
        import anyio
        from mcp.shared.message import SessionMessage
        from mcp_types import jsonrpc_message_adapter

        reader = asyncio.StreamReader(limit=MAX_LINE)
        transport, _ = await self.loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), self._stdout)
        try:
            async with self.to_session:
                while True:
                    try:
                        line = await reader.readline()
                    except ValueError:  # over MAX_LINE (not kept): the server's fault, and the end of its session
                        self.errlog.note(f"trajkit: a message from this server was over {MAX_LINE >> 20} MiB")
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


def _environment(cfg: ServerConfig) -> dict[str, str]:
    """The environment a spawned instance gets: the MCP SDK's safe defaults, then ``child_environment``."""
    from mcp.client.stdio import get_default_environment

    return get_default_environment() | child_environment(cfg)
