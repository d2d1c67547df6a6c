"""The e2b backend: run programs in e2b cloud sandboxes, with the local ``Sandbox``'s interface.

Needs the ``e2b`` extra (``pip install 'trajkit[e2b]'``) and an API key
(``E2B_API_KEY`` or ``api_key=``). Each run is one command in a remote
sandbox: the same worker and harness as the local backend run there once
(``python FOLDER worker --once``, rlimits only — the cloud VM is the isolation
boundary), so verdicts, the ``finished`` flag and the output caps mean the
same thing on both backends. Remote sandboxes are created on demand, at most
``workers`` at a time, reused across runs, and killed by ``close()``; one that
fails a request is discarded. Programs and their input travel inside the
command (about 100 KB at most).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import shlex
import threading
import zlib
from pathlib import Path
from typing import Self

from trajkit.confine import start
from trajkit.errors import UserError
from trajkit.verify.result import RunResult

_SOURCES = (  # the worker's modules (trajkit/confine/), unpacked remotely into a folder holding only them
    "__init__.py",
    "__main__.py",
    "worker.py",
    "zygote.py",
    "messages.py",
    "program_zygote.py",
    "outcome.py",
    "harness.py",
    "crossing.py",
    "plain.py",
    "isolation.py",
)
MAX_COMMAND_BYTES = 120_000  # one argv string to bash: Linux caps it at 128 KiB

BOOTSTRAP = """
import base64, json, os, shutil, subprocess, sys, tempfile, zlib
payload = json.loads(zlib.decompress(base64.b64decode(sys.stdin.read())))
home = tempfile.mkdtemp(prefix="trajkit-")
jail = os.path.join(home, "jail")  # holding only the package and its __main__.py
os.makedirs(os.path.join(jail, "confine"))
for name, text in payload["files"].items():
    with open(os.path.join(jail, name), "w") as f:
        f.write(text)
with open(os.path.join(home, "request.json"), "w") as f:
    json.dump(payload["request"], f)
done = subprocess.run([sys.executable, "-s", "-B", jail, "worker", "--once", os.path.join(home, "request.json")])
shutil.rmtree(home, ignore_errors=True)
sys.exit(done.returncode)
"""


class E2BSandbox:
    """A pool of e2b sandboxes; ``run(program)`` has the same signature and result as ``Sandbox.run``.

    ``connection`` goes to ``e2b.Sandbox.create`` as is (``domain``,
    ``request_timeout``, ``http_version``, ``api_url``, ``sandbox_url``...).
    """

    def __init__(
        self,
        workers: int = 4,
        *,
        template: str | None = None,
        api_key: str | None = None,
        lifetime_s: int = 600,
        user: str = "user",
        **connection,
    ):
        self.workers = workers
        self.template = template
        self.api_key = api_key
        self.lifetime_s = lifetime_s
        self.user = user
        self.connection = connection
        self._idle: queue.Queue = queue.Queue()
        self._slots = threading.Semaphore(workers)
        self._live: list = []
        self._lock = threading.Lock()
        self._sdk = None

    def start(self) -> E2BSandbox:
        """Check that the SDK and a key are there (a UserError if not); remote sandboxes start on first use."""
        try:
            import e2b
        except ImportError:
            raise UserError("the e2b sandbox needs the e2b extra: pip install 'trajkit[e2b]'") from None
        self.api_key = self.api_key or os.environ.get("E2B_API_KEY")
        if not self.api_key:
            raise UserError("the e2b sandbox needs an API key: set E2B_API_KEY")
        self._sdk = e2b
        return self

    def run(
        self,
        program: str,
        stdin: str | None = None,
        timeout_s: float = 10,
        memory_mb: int = 1024,
        *,
        preload: tuple[str, ...] = (),
        tests: dict | None = None,
    ) -> RunResult:
        """Run a Python program in a remote sandbox under the limits (``preload`` is a no-op here);
        ``tests`` as in ``Sandbox.run``, in the same request (the cloud VM holds nothing else)."""
        if self._sdk is None:
            self.start()
        request = {"program": program, "stdin": stdin, "timeout_s": timeout_s, "memory_mb": memory_mb}
        if tests is not None:
            request["tests"] = tests
        command = _command(request)
        if len(command.encode()) > MAX_COMMAND_BYTES:
            return RunResult("error", reason=f"program and input exceed the e2b backend's {MAX_COMMAND_BYTES} bytes")
        self._slots.acquire()
        remote = None
        try:
            remote = self._take()
            done = remote.commands.run(command, user=self.user, timeout=timeout_s + 60)
            answer = json.loads(done.stdout)
        except self._sdk.CommandExitException as exc:
            self._discard(remote)
            return RunResult("error", reason=f"e2b worker exited with {exc.exit_code}: {exc.stderr[-500:]}")
        except Exception as exc:  # noqa: BLE001 - a remote fault (network, quota, auth, garbled answer) judges nothing
            self._discard(remote)
            return RunResult("error", reason=f"e2b: {type(exc).__name__}: {exc}")
        else:
            self._idle.put(remote)
        finally:
            self._slots.release()
        return RunResult(**{k: v for k, v in answer.items() if k in RunResult.__dataclass_fields__})

    def _take(self):
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        remote = self._sdk.Sandbox.create(
            template=self.template,
            timeout=self.lifetime_s,
            metadata={"created_by": "trajkit.verify"},
            allow_internet_access=False,
            api_key=self.api_key,
            **self.connection,
        )
        with self._lock:
            self._live.append(remote)
        return remote

    def _discard(self, remote) -> None:
        if remote is None:
            return
        with self._lock:
            if remote in self._live:
                self._live.remove(remote)
        with contextlib.suppress(Exception):  # gone already; its lifetime ends it otherwise
            remote.kill()

    def close(self) -> None:
        """Kill every remote sandbox this pool created."""
        with self._lock:
            live, self._live = self._live, []
        for remote in live:
            with contextlib.suppress(Exception):
                remote.kill()
        self._idle = queue.Queue()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_exc) -> None:
        self.close()


def _command(request: dict) -> str:
    """One bash command that unpacks the worker and runs ``request`` with it; prints the answer as JSON."""
    files = {f"confine/{name}": (Path(start.PACKAGE) / name).read_text() for name in _SOURCES}
    files["__main__.py"] = files["confine/__main__.py"]
    blob = zlib.compress(json.dumps({"files": files, "request": request}).encode(), 9)
    text = base64.b64encode(blob).decode()
    lines = "\n".join(text[i : i + 76] for i in range(0, len(text), 76))
    return f"python3 -c {shlex.quote(BOOTSTRAP)} <<'TRAJKIT_PAYLOAD'\n{lines}\nTRAJKIT_PAYLOAD"
