"""The local sandbox: a pool of confined worker processes that run untrusted Python programs.

``Sandbox`` starts one worker per slot (``trajkit/confine/worker.py`` in a fresh interpreter
with a scrubbed environment; see ``docs/sandbox.md`` for the threat model).
``run`` takes an idle worker, sends it the program, and waits; calls from
several threads run in parallel, one per worker. A worker that dies or stops
answering yields an ``error`` verdict and is replaced on its next use.
Start the pool before anything initializes CUDA (training starts it first).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import itertools
import json
import logging
import os
import pwd
import queue
import re
import select
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Self

from trajkit.concurrency import Share
from trajkit.confine import isolation, start
from trajkit.errors import UserError
from trajkit.verify.result import RunResult

log = logging.getLogger("trajkit.verify")

_HEADER = struct.Struct(">I")
_SERIALS = itertools.count(1)
WORKERS_PER_CPU = 8  # each worker is three processes and a uid; more only queue for the CPUs

# What programs may import besides the standard library: the math verifier's math-verify (with sympy), and numpy.
DEFAULT_PACKAGES = ("math-verify", "numpy")

# Modules the zygote imports once so that programs find them warm.
DEFAULT_PRELOAD = (
    "bisect", "collections", "copy", "dataclasses", "datetime", "decimal", "fractions", "functools",
    "hashlib", "heapq", "itertools", "json", "math", "operator", "random", "re", "statistics", "string",
    "typing",
)  # fmt: skip

# What a program can do when a protection is missing (logged when the pool starts).
EFFECT_IF_MISSING = {
    "uid": "programs run as the caller's user: without the mount namespace they can read every file it can read, "
    "and without the mount and PID namespaces also write its files and signal its processes (and, as root, the "
    "process limit does not bind)",
    "pid_namespace": "programs can see the host's processes and signal those of their own user, and a run's PIDs "
    "tell how many processes the runs before it started",
    "net_namespace": "programs share the host's network namespace: they can connect to its abstract Unix sockets "
    "(and, without the seccomp filter, can open network connections, including to services on loopback)",
    "ipc_namespace": "programs share the host's System V and POSIX IPC objects: a message queue, semaphore or shared "
    "memory segment one run leaves is there for the next, and stays on the host",
    "mount_namespace": "programs see the host's whole filesystem, which is not read-only for them, and /tmp is "
    "shared: only file permissions stop reads and writes",
    "cgroup": "memory and process limits are per process (rlimits), not per program",
    "seccomp": "programs can create user namespaces, and inside them mount and network namespaces of their own, "
    "read the keys of the caller's session keyring, and open network sockets",
}


# The protections each Sandbox option stands for.
_PROVIDES = {
    "namespaces": ("pid_namespace", "net_namespace", "ipc_namespace", "mount_namespace"),
    "drop_privileges": ("uid",),
    "cgroups": ("cgroup",),
}


class SandboxUnavailable(UserError):
    """A protection the caller required, or any the machine cannot give without ``--allow-weaker-sandbox``."""


class Sandbox:
    """A pool of confined workers; ``run(program)`` executes one Python program in one of them.

    ``namespaces``, ``drop_privileges`` and ``cgroups``: None requires each
    unless ``allow_weaker`` (default: ``--allow-weaker-sandbox`` was passed),
    in which case a missing one is logged as a warning; True requires it
    regardless; False turns it off (the fallback path). ``share``: the CPUs the
    pool sizes itself from (a stage's ``StageContext.share``; by default the
    machine's CPUs). ``packages``: the installed distributions programs may
    import, with those they require (the standard library always); nothing else
    of the host is in their view (docs/sandbox.md).
    """

    def __init__(
        self,
        workers: int | None = None,
        *,
        share: Share | None = None,
        namespaces: bool | None = None,
        drop_privileges: bool | None = None,
        cgroups: bool | None = None,
        max_procs: int = 64,
        max_output_bytes: int = 1 << 20,
        max_file_mb: int = 64,
        tmp_mb: int = 64,
        uid_base: int = 64000,
        preload: tuple[str, ...] = DEFAULT_PRELOAD,
        env: dict[str, str] | None = None,
        packages: tuple[str, ...] = DEFAULT_PACKAGES,
        allow_weaker: bool | None = None,
    ):
        share = share or Share()
        self.workers = workers or share.cpus
        limit = WORKERS_PER_CPU * share.cpus
        if not 1 <= self.workers <= limit:
            raise SandboxUnavailable(
                f"{self.workers} sandbox workers: this machine can run 1 to {limit} "
                f"({WORKERS_PER_CPU} per CPU, {share.cpus} CPUs)"
            )
        self.allow_weaker = allow_weaker  # None: whether --allow-weaker-sandbox was passed
        self.options = {"namespaces": namespaces, "drop_privileges": drop_privileges, "cgroups": cgroups}
        self.config = {
            "max_procs": max_procs,
            "max_output_bytes": max_output_bytes,
            "max_file_mb": max_file_mb,
            "tmp_mb": tmp_mb,
            "preload": list(preload),
            "allow": distribution_files(packages),
            **self.options,
        }
        self.env = _program_env(env)
        self.uid_base = uid_base
        self.missing: dict[str, str] = {}
        self._pool: list[_Worker] = []
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._lock = threading.Lock()
        self._started = False

    def start(self) -> Sandbox:
        """Start every worker (idempotent); raises SandboxUnavailable if a required protection is missing."""
        with self._lock:
            if self._started:
                return self
            if not sys.platform.startswith("linux"):
                raise SandboxUnavailable("the local sandbox needs Linux; use the e2b backend elsewhere")
            root = os.geteuid() == 0
            use_uid = root and self.options["drop_privileges"] is not False
            if self.options["drop_privileges"] and not root:
                raise SandboxUnavailable("drop_privileges=True needs root")
            try:
                for i in range(self.workers):
                    self._pool.append(_Worker(self, i, _claim_uid(self.uid_base) if use_uid else None))
                for w in self._pool:
                    w.spawn()
                for w in self._pool:
                    w.wait_ready()
            except BaseException:
                self._shutdown()
                raise
            self.missing = dict(self._pool[0].missing)
            required = [option for option, wanted in self.options.items() if wanted]
            lacking = [p for option in required for p in _PROVIDES[option] if p in self.missing]
            if lacking:
                self._shutdown()
                raise SandboxUnavailable(", ".join(f"{p}: {self.missing[p]}" for p in lacking))
            turned_off = {p for option, wanted in self.options.items() if wanted is False for p in _PROVIDES[option]}
            absent = sorted(set(self.missing) - turned_off)
            try:  # one line naming them all
                why = "; ".join(f"{p}: {self.missing[p]}" for p in absent) if absent else None
                isolation.require(", ".join(absent), why, self.allow_weaker)
            except isolation.ProtectionMissing as exc:
                self._shutdown()
                raise SandboxUnavailable(str(exc)) from None
            for w in self._pool:
                self._idle.put(w)
            self._started = True
        if self.missing:
            log.warning(
                "sandbox: running without %s",
                "; ".join(f"{p} ({why}): {EFFECT_IF_MISSING[p]}" for p, why in sorted(self.missing.items())),
            )
        return self

    @property
    def protections(self) -> dict[str, bool]:
        """Each optional protection and whether it is in force (all true on a root Linux host)."""
        return {p: p not in self.missing for p in EFFECT_IF_MISSING}

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
        """Run a Python program (as ``__main__``) with ``stdin`` as its input, under the limits.

        ``preload`` names trusted modules the worker imports before forking
        (once per worker), so programs that use them start warm. ``tests``
        (``program`` and ``names``, from ``unit_test_parts``) runs trusted test
        code in a second process against the program's functions; only its end
        decides the verdict.
        """
        if not self._started:
            self.start()
        request = {"program": program, "stdin": stdin, "timeout_s": timeout_s, "memory_mb": memory_mb}
        if preload:
            request["preload"] = list(preload)
        if tests is not None:
            request["tests"] = True  # sent as a second message, after the solution's process is forked
        worker = self._idle.get()
        try:
            answer = worker.request(request, timeout_s + 30 + 30 * bool(preload), tests)
        except _WorkerLost as exc:
            worker.stop()
            return RunResult("error", reason=f"sandbox worker lost: {exc}")
        finally:
            self._idle.put(worker)
        return RunResult(**{k: v for k, v in answer.items() if k in RunResult.__dataclass_fields__})

    def close(self) -> None:
        """Stop every worker and release its uid."""
        with self._lock:
            self._shutdown()
            self._started = False

    def _shutdown(self) -> None:
        for w in self._pool:
            w.stop()
        for w in self._pool:
            w.release()
        self._pool = []
        self._idle = queue.Queue()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_exc) -> None:
        self.close()


class _WorkerLost(Exception):
    pass


class _Worker:
    """One worker process (supervisor and zygote) and the pipes to it."""

    def __init__(self, sandbox: Sandbox, slot: int, uid_lock: tuple[int, int] | None):
        self.sandbox = sandbox
        self.slot = slot
        self.uid, self.lock_fd = uid_lock or (None, None)
        self.proc: subprocess.Popen | None = None
        self.missing: dict[str, str] = {}
        self.serial = 0

    def spawn(self) -> None:
        self.serial = next(_SERIALS)  # unique in this process: pools may share slot numbers
        self.proc = subprocess.Popen(
            # -I but -E: the environment is built here, and its PYTHONHASHSEED=0 keeps programs' output the same
            start.command(sys.executable, "worker", flags=("-s",)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=self.sandbox.env,
            cwd="/",
            start_new_session=True,  # terminal signals go to the caller, which stops the pool
        )
        config = {
            **self.sandbox.config,
            "uid": self.uid,
            "name": f"trajkit-{os.getpid()}-{self.slot}-{self.serial}",
        }
        _send(self.proc.stdin.fileno(), config)

    def wait_ready(self) -> None:
        ready = _receive(self.proc.stdout.fileno(), time.monotonic() + 120)
        if not ready.get("ready"):
            raise _WorkerLost(f"worker {self.slot} did not start: {ready}")
        self.missing = ready["missing"]

    def request(self, message: dict, wait_s: float, follow: dict | None = None) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self.stop()
            try:
                self.spawn()
                self.wait_ready()
            except (OSError, _WorkerLost) as exc:
                raise _WorkerLost(f"cannot restart worker {self.slot}: {exc}") from None
        _send(self.proc.stdin.fileno(), message)
        if follow is not None:
            _send(self.proc.stdin.fileno(), follow)
        return _receive(self.proc.stdout.fileno(), time.monotonic() + wait_s)

    def stop(self) -> None:
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        for stream in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                stream.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.terminate()  # the supervisor kills its zygote and removes its cgroup
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def release(self) -> None:
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None


def _send(fd: int, message: dict) -> None:
    body = json.dumps(message).encode()
    data = _HEADER.pack(len(body)) + body
    try:
        while data:
            data = data[os.write(fd, data) :]
    except (BrokenPipeError, OSError) as exc:
        raise _WorkerLost(f"cannot write to the worker: {exc}") from None


def _receive(fd: int, deadline: float) -> dict:
    header = _read(fd, _HEADER.size, deadline)
    try:
        return json.loads(_read(fd, _HEADER.unpack(header)[0], deadline))
    except ValueError as exc:
        raise _WorkerLost(f"garbled answer: {exc}") from None


def _read(fd: int, n: int, deadline: float) -> bytes:
    data = bytearray()
    poller = select.poll()  # not select(): a trainer's descriptors can be numbered past 1024
    poller.register(fd, select.POLLIN)
    while len(data) < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not poller.poll(remaining * 1000):
            raise _WorkerLost("the worker stopped answering")
        chunk = os.read(fd, n - len(data))
        if not chunk:
            raise _WorkerLost("the worker exited")
        data += chunk
    return bytes(data)


def _program_env(extra: dict[str, str] | None) -> dict[str, str]:
    """The whole environment workers and programs see: nothing inherited from the caller."""
    env = {
        "PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MALLOC_ARENA_MAX": "2",
    }
    env.update(extra or {})
    return env


def distribution_files(names: tuple[str, ...]) -> list[str]:
    """The top-level files and folders (packages, modules, ``.dist-info``, bundled libraries) of the installed
    distributions ``names`` and of every distribution they require (extras aside), as absolute paths."""
    from importlib import metadata

    todo, seen, paths = list(names), set(), set()
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for file in dist.files or ():
            top = file.parts[0]
            if top not in ("..", "__pycache__") and not top.endswith(".pth"):
                paths.add(os.path.realpath(dist.locate_file(top)))
        for requirement in dist.requires or ():
            if "extra" not in requirement.partition(";")[2]:
                todo.append(re.match(r"[A-Za-z0-9._-]+", requirement).group())
    return sorted(paths)


def _claim_uid(base: int, span: int = 4096) -> tuple[int, int]:
    """An unused uid for one worker, held through a lock file so that concurrent pools never share one."""
    lock_dir = os.path.join(tempfile.gettempdir(), "trajkit-sandbox-uids")
    os.makedirs(lock_dir, mode=0o700, exist_ok=True)
    for uid in range(base, base + span):
        try:
            pwd.getpwuid(uid)
            continue  # a real account
        except KeyError:
            pass
        fd = os.open(os.path.join(lock_dir, str(uid)), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return uid, fd
        except BlockingIOError:
            os.close(fd)
    raise SandboxUnavailable(f"no free uid in {base}..{base + span - 1}")


_defaults: dict[Share, Sandbox] = {}
_default_lock = threading.Lock()


def default_sandbox(share: Share | None = None) -> Sandbox:
    """The process-wide sandbox of a share (``verify`` uses the machine's when given none): started on first
    use, shared by every later caller with the same share, closed at exit."""
    share = share or Share()
    with _default_lock:
        if share not in _defaults:
            _defaults[share] = Sandbox(share=share).start()
            atexit.register(_defaults[share].close)
        return _defaults[share]
