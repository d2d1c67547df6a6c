"""Fresh contained instances of a Python stdio server forked from a zygote instead of spawned.

A spawned instance of a Python server pays its interpreter's start and every import (about a
CPU-second for an ``mcp`` server); forked from a process that made those imports once
(``zygote.py``), it pays a fork and the containment (docs/sandbox.md has the numbers). A server
qualifies when its ``command`` is a Python interpreter (``python``, ``python3.12``, a venv's
``.../bin/python``) running ``-m MODULE`` or a ``.py`` script, with nothing else before them, and uses
no ``${SESSION_DIR}``; ``uvx``, ``uv run``, console scripts and node servers are spawned, as are
stateless servers' shared instances and harvest's start. A server whose entry has ``fork: false``
in the servers config is spawned too.

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

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile

from trajkit.envs import contain
from trajkit.envs.config import ServerConfig, child_environment, resolve_command
from trajkit.envs.zygote import THREADED

ZYGOTE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zygote.py")
PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
MAX_RESTARTS = 2
log = logging.getLogger(__name__)


def python_entry(cfg: ServerConfig) -> list[str] | None:
    """``[-m, MODULE, ARGS...]`` or ``[SCRIPT, ARGS...]`` of a server that qualifies for forking, else None."""
    if not cfg.fork or cfg.transport != "stdio" or cfg.uses_session_dir:
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
        self._dir: str | None = None
        self._log = None

    def wrap(self, launcher: list[str]) -> list[str]:
        """The arguments (after ``python``) that start one instance: the stand-in for a fork from the zygote,
        or ``launcher`` (``contain.wrap``'s) as it is when the zygote gave up."""
        if not self._running():
            return launcher
        return ["-I", "-S", ZYGOTE, "attach", os.path.join(self._dir, "sock"), "--", *launcher]

    def _running(self) -> bool:
        if self.gone is not None:
            return False
        if self.proc is not None:
            if self.proc.poll() is None:
                return True
            code, reason = self.proc.returncode, f"exited with status {self.proc.returncode}{self._tail()}"
            self.close()
            if code == THREADED and self.rehearse:  # perhaps what its rehearsal imported: again, without
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
        self._dir = tempfile.mkdtemp(prefix="trajkit-fork-")
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as listener:
            listener.bind(os.path.join(self._dir, "sock"))
            listener.listen(1024)
            keep = os.environ.get(contain.ENV_KEEP)
            spec = {
                "writable": [],
                "disk_mb": 1,
                "keep": None,
                "through": [keep] if keep else [],
                "rehearse": self.rehearse,
            }
            fd, spec = str(listener.fileno()), json.dumps(spec)
            self.proc = subprocess.Popen(
                [resolve_command(cfg.command), ZYGOTE, "serve", fd, str(os.getpid()), spec, "--", *cfg.args],
                pass_fds=[listener.fileno()],
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
        """Kill the zygote and its process group (its instances, if any are left, die with it) and remove its socket."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):  # its group: what the server's body started at import too
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def _environment(cfg: ServerConfig) -> dict[str, str]:
    """The environment a spawned instance gets: the MCP SDK's safe defaults, then ``child_environment``."""
    from mcp.client.stdio import get_default_environment

    return get_default_environment() | child_environment(cfg)
