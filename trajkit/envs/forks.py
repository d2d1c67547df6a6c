"""Fresh contained instances of a Python stdio server forked from a zygote instead of spawned.

A spawned instance of a Python server pays its interpreter's start and every import (about a
CPU-second for an ``mcp`` server); forked from a process that made those imports once
(``trajkit/confine/server_zygote.py``), it pays a fork and the containment (docs/sandbox.md has the numbers). A server
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
thread started at import would not survive a fork, and a process started there would be one for every
instance, beside all of them: such a server's instances are spawned).
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
from collections.abc import AsyncIterator
from typing import Any

from trajkit.confine import start
from trajkit.confine.server_zygote import REHEARSED_UNFIT, UNFIT
from trajkit.envs import contain
from trajkit.envs.config import ServerConfig, resolve_command
from trajkit.envs.stdio import Stderr, Streams, environment

PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
MAX_RESTARTS = 2
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
        self._log: Stderr | None = None  # the zygote's stderr (its tail: why it exited)

    @contextlib.asynccontextmanager
    async def instance(
        self, launcher: list[str], errlog: Stderr, max_line: int, timeout_s: float = 60.0
    ) -> AsyncIterator[tuple[Any, Any]]:
        """One instance forked from the zygote, contained as ``launcher`` (``contain.wrap``'s arguments) says,
        its stderr written to ``errlog``: the (read, write) streams of an MCP session over its stdin and stdout
        (messages of at most ``max_line`` bytes),
        as ``stdio.spawn`` gives for a spawned server (no process is spawned for it), and ended as there. An
        instance whose zygote died says so on ``errlog``. ``NotForked`` (before anything started) when there is no zygote to
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
        async with Streams(Forked(loop, sock), stdin[1], stdout[0], errlog, max_line) as streams:
            yield streams

    def _running(self) -> bool:
        if self.gone is not None:
            return False
        if self.proc is not None:
            if self.proc.poll() is None:
                return True
            code, reason = self.proc.returncode, f"exited with status {self.proc.returncode}{self._log.tail()}"
            self.close()
            if code == REHEARSED_UNFIT:  # what its rehearsal found started a thread or a process: again, without
                self.rehearse = False
            elif code == UNFIT or self.restarts >= MAX_RESTARTS:
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
        self._log = Stderr()  # (no file: a body that writes stderr forever costs reads, not disk)
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
                start.command(
                    resolve_command(cfg.command), "server_zygote", "serve", fd, str(os.getpid()), spec, "--", *cfg.args
                ),
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._log,
                env=environment(cfg),
                cwd=cfg.cwd,
                start_new_session=True,
            )

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


class Forked:
    """A forked instance's status and signals, through its socket with the zygote (``Streams``' ``process``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket):
        self.loop, self.sock = loop, sock

    async def status(self) -> int | None:
        """Its exit status; None: the zygote went first."""
        try:
            word = await self.loop.sock_recv(self.sock, 64)
        except OSError:
            word = b""
        finally:
            self.sock.close()
        return int(word.split()[1]) if word.startswith(b"exit ") else None

    def term(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.send(b"term")

    def kill(self) -> None:
        with contextlib.suppress(OSError):  # the zygote kills an instance whose client hangs up
            self.sock.shutdown(socket.SHUT_RDWR)
