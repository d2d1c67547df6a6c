"""The sandbox worker: a fork server that runs each program in a confined child process.

``Sandbox`` starts one per slot as ``python -s -B worker.py`` — a fresh
interpreter with an environment built from scratch, never a fork of the
caller — and talks to it over stdin/stdout with length-prefixed JSON
messages. Standard library only. Three processes per slot:

- the *supervisor* (root where available) makes the slot's cgroup, enters new
  mount, network, PID, IPC and UTS namespaces, forks the zygote, and removes
  the cgroup (and the fallback's private directory) once the zygote is gone;
- the *zygote*, PID 1 of the new PID namespace and a member of the cgroup,
  remounts the filesystem read-only, mounts a private /tmp, pre-imports
  modules, then serves requests until the caller closes the pipe;
- per program, a *child* forked from the zygote: it sets rlimits, drops to
  the slot's uid with no capabilities and no new privileges, and runs the
  program through ``harness.execute``.

The zygote enforces the wall-time limit and the output cap, then kills every
process the program left behind before answering. ``--once FILE`` runs one
request without namespaces and prints the answer (the e2b backend runs the
worker that way inside a cloud sandbox).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import math
import os
import resource
import select
import shutil
import signal
import struct
import sys
import tempfile
import time
import traceback

import harness
import isolation

sys.path.pop(0)  # this directory: programs must not import the worker's modules by name

_HEADER = struct.Struct(">I")
_STATUS_CAP = 1 << 16


def read_message(fd: int) -> dict | None:
    header = _read_exactly(fd, _HEADER.size)
    if header is None:
        return None
    body = _read_exactly(fd, _HEADER.unpack(header)[0])
    return None if body is None else json.loads(body)


def write_message(fd: int, message: dict) -> None:
    body = json.dumps(message).encode()
    data = _HEADER.pack(len(body)) + body
    while data:
        data = data[os.write(fd, data) :]


def _read_exactly(fd: int, n: int) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = os.read(fd, n - len(chunks))
        if not chunk:
            return None
        chunks += chunk
    return bytes(chunks)


class Zygote:
    """Serves run requests: one confined child per program, everything it left killed afterwards."""

    def __init__(self, config: dict, cgroup: isolation.Cgroup | None, namespaces: bool, missing: dict, tmp: str):
        self.config = config
        self.cgroup = cgroup
        self.namespaces = namespaces
        self.missing = missing
        self.uid: int | None = config.get("uid")
        self.tmp = tmp  # /tmp in the mount namespace; else a private directory the supervisor removes

    def setup(self) -> dict:
        """Confine this process's world; returns the protections in force and those missing."""
        if self.cgroup is not None:
            self.cgroup.limit_processes(int(self.config.get("max_procs", 64)) + 1)  # + the zygote
            self.cgroup.join()  # children are born in it: no per-program migration
            _oom_score_adj(-1000)  # under memory pressure, the program dies, never the zygote
        if self.namespaces:
            needed = [sys.prefix, sys.base_prefix, *sys.path]
            failed = isolation.confine_filesystem(self.uid, needed, self.config.get("hide", []))
            if "/" in failed:
                self.missing["mount_namespace"] = "could not remount / read-only"
            isolation.sethostname("sandbox")
        else:
            isolation.prctl(isolation.PR_SET_CHILD_SUBREAPER, 1)
        isolation.prctl(isolation.PR_SET_PDEATHSIG, signal.SIGKILL)
        self._fresh_tmp()
        os.environ.update(HOME=self.tmp, TMPDIR=self.tmp)  # the rest was scrubbed by the caller
        tempfile.tempdir = self.tmp
        atexit._clear()  # programs run only their own exit handlers
        for name in self.config.get("preload", ()):
            self._preload(name)
        gc.freeze()
        os.chdir("/")
        if self.uid is None and "uid" not in self.missing:
            self.missing["uid"] = "disabled" if self.config.get("drop_privileges") is False else "not root"
        return {"missing": self.missing, "uid": self.uid, "tmp": self.tmp, "cgroup": self.cgroup is not None}

    def _fresh_tmp(self) -> None:
        size = int(self.config.get("tmp_mb", 64))
        if self.namespaces:
            isolation.mount_private_tmpfs("/tmp", self.uid, size)
            if os.path.isdir("/dev/shm"):
                isolation.mount_private_tmpfs("/dev/shm", self.uid, size)
            return
        shutil.rmtree(self.tmp, onerror=_force_remove)
        os.mkdir(self.tmp, 0o700)
        if self.uid is not None:
            os.chown(self.tmp, self.uid, self.uid)

    def close(self) -> None:
        isolation.kill_everything(self.namespaces)

    @staticmethod
    def _preload(name: str) -> None:
        if name in sys.modules:
            return
        with contextlib.suppress(Exception):  # the program's own import will then fail and say why
            importlib.import_module(name)
        gc.freeze()  # forked children then never touch (and copy) the zygote's objects when collecting

    def run(self, request: dict) -> dict:
        """Run one program; the answer says how it ended (the verdict) and what it printed."""
        for name in request.get("preload", ()):
            self._preload(name)
        timeout = float(request.get("timeout_s", 10))
        memory_mb = int(request.get("memory_mb", 1024))
        max_procs = int(self.config.get("max_procs", 64))
        oom_before = 0
        if self.cgroup is not None:
            try:
                self.cgroup.limit_memory(memory_mb << 20)
                oom_before = self.cgroup.oom_kills()
            except OSError as exc:
                return _answer("error", reason=f"sandbox: cannot set cgroup limits: {exc}")
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        st_r, st_w = os.pipe()
        stdin_fd = _stdin_fd(request.get("stdin"))
        nonce = os.urandom(8).hex()
        limits = _limits(timeout, memory_mb, max_procs, self.config, self.uid)
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            self._child(request["program"], stdin_fd, out_w, err_w, st_w, nonce, limits)
        for fd in (out_w, err_w, st_w, stdin_fd):
            os.close(fd)
        try:
            watch = _watch(pid, out_r, err_r, st_r, start + timeout, int(self.config.get("max_output_bytes", 1 << 20)))
        finally:
            for fd in (out_r, err_r, st_r):
                os.close(fd)
        runtime = time.monotonic() - start
        wait_status, cpu_s = None, 0.0
        if watch["exited"]:
            _, wait_status, usage = os.wait4(pid, 0)
            cpu_s = usage.ru_utime + usage.ru_stime
        isolation.kill_everything(self.namespaces)
        oom = self.cgroup is not None and self.cgroup.oom_kills() > oom_before
        try:
            self._fresh_tmp()
        except OSError as exc:
            return _answer("error", reason=f"sandbox: cannot reset the private /tmp: {exc}")
        return _classify(watch, wait_status, cpu_s, oom, nonce, timeout, memory_mb, runtime, limits)

    def _child(self, program: str, stdin_fd: int, out_w: int, err_w: int, st_w: int, nonce: str, limits: dict):
        status_fd = st_w
        try:
            os.setsid()
            _oom_score_adj(1000)  # the first thing any out-of-memory killer takes
            for fd, target in ((stdin_fd, 0), (out_w, 1), (err_w, 2), (st_w, 3)):
                os.dup2(fd, target)
            status_fd = 3
            os.closerange(4, 1 << 16)
            for name, value in limits.items():
                resource.setrlimit(getattr(resource, name), (value, value))
            os.chdir(self.tmp)
            if self.uid is not None:
                isolation.drop_privileges(self.uid)
            else:
                isolation.prctl(isolation.PR_SET_NO_NEW_PRIVS, 1)
            isolation.prctl(isolation.PR_SET_PDEATHSIG, signal.SIGKILL)
            for name in ("harness", "isolation"):
                sys.modules.pop(name, None)
        except BaseException as exc:  # noqa: BLE001 - never run a program that is not fully confined
            _emergency_status(status_fd, nonce, f"{type(exc).__name__}: {exc}")
            os._exit(126)
        harness.execute(program, 3, nonce)


def _oom_score_adj(value: int) -> None:
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(value))
    except OSError:
        pass  # some hosts forbid lowering it; a preference, not a protection


def _limits(timeout: float, memory_mb: int, max_procs: int, config: dict, uid: int | None) -> dict:
    """rlimits for one program; the address-space budget comes on top of what the zygote already maps."""
    cpu = math.ceil(timeout) + 1
    shared_uid = uid is None and os.geteuid() != 0  # the limit counts every process of the caller's user
    nproc = _own_process_count() + max_procs if shared_uid else max_procs
    return {
        "RLIMIT_AS": _vm_size() + (memory_mb << 20),
        "RLIMIT_CPU": cpu,
        "RLIMIT_FSIZE": int(config.get("max_file_mb", 64)) << 20,
        "RLIMIT_NOFILE": 1024,
        "RLIMIT_NPROC": nproc,
        "RLIMIT_CORE": 0,
    }


def _vm_size() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


def _own_process_count() -> int:
    """Tasks of this real uid on the host: RLIMIT_NPROC counts them all, not just the program's."""
    uid, count = str(os.getuid()), 0
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == int(uid):
                count += len(os.listdir(f"/proc/{entry}/task"))
        except OSError:
            continue
    return count


def _stdin_fd(stdin: str | None) -> int:
    if stdin is None:
        return os.open(os.devnull, os.O_RDONLY)
    fd = os.memfd_create("stdin", os.MFD_CLOEXEC)
    data = stdin.encode()
    while data:
        data = data[os.write(fd, data) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _watch(pid: int, out_r: int, err_r: int, st_r: int, deadline: float, cap: int) -> dict:
    """Collect the child's output until it exits, the wall time runs out, or the output cap is passed."""
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    buffers = {out_r: bytearray(), err_r: bytearray(), st_r: bytearray()}
    for fd in (*buffers, pidfd):
        poller.register(fd, select.POLLIN)
    exited = timed_out = flooded = False
    try:
        while not (exited or flooded):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for fd, _ in poller.poll(remaining * 1000):
                if fd == pidfd:
                    exited = True
                elif not _read_into(fd, buffers[fd]):
                    poller.unregister(fd)
            flooded = len(buffers[out_r]) + len(buffers[err_r]) > cap or len(buffers[st_r]) > _STATUS_CAP
        if exited and not flooded:
            for fd, buffer in buffers.items():  # what is in the pipes now; descendants may hold them open
                os.set_blocking(fd, False)
                while len(buffer) <= cap and _read_into(fd, buffer):
                    pass
    finally:
        os.close(pidfd)
    return {
        "exited": exited,
        "timed_out": timed_out,
        "flooded": flooded,
        "stdout": bytes(buffers[out_r][:cap]),
        "stderr": bytes(buffers[err_r][:cap]),
        "status": bytes(buffers[st_r][:_STATUS_CAP]),
        "cap": cap,
    }


def _read_into(fd: int, buffer: bytearray) -> bool:
    try:
        chunk = os.read(fd, 1 << 16)
    except BlockingIOError:
        return False
    buffer += chunk
    return bool(chunk)


def _status(raw: bytes, nonce: str) -> dict:
    for line in reversed(raw.splitlines()):
        try:
            status = json.loads(line)
        except ValueError:
            continue
        if isinstance(status, dict) and status.get("nonce") == nonce:
            return status
    return {}


def _classify(watch, wait_status, cpu_s, oom, nonce, timeout, memory_mb, runtime, limits) -> dict:
    status = _status(watch["status"], nonce)
    out = {"stdout": watch["stdout"], "stderr": watch["stderr"], "runtime_s": round(runtime, 4)}
    exception = status.get("exception")
    if watch["timed_out"]:
        return _answer("timeout", reason=f"wall time limit of {timeout:g}s exceeded", exception=exception, **out)
    if watch["flooded"]:
        return _answer("fail", reason=f"output exceeded {watch['cap']} bytes", **out)
    if "setup_error" in status:
        return _answer("error", reason=f"sandbox: could not confine the program: {status['setup_error']}", **out)
    if os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        name = signal.Signals(sig).name if sig in signal.valid_signals() else str(sig)
        if oom:
            verdict, reason = "memory", f"killed by the out-of-memory killer (limit {memory_mb} MB)"
        elif sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_s >= limits["RLIMIT_CPU"] - 0.5):
            verdict, reason = "timeout", f"CPU time limit of {limits['RLIMIT_CPU']}s exceeded"
        else:
            verdict, reason = "fail", f"killed by {name}"
        return _answer(verdict, reason=reason, signal=sig, exception=exception, **out)
    code = os.WEXITSTATUS(wait_status)
    if status.get("memory") or (code != 0 and oom):
        return _answer(
            "memory", reason=f"memory limit of {memory_mb} MB exceeded", exit_code=code, exception=exception, **out
        )
    if code != 0:
        return _answer("fail", reason=exception or f"exit code {code}", exit_code=code, exception=exception, **out)
    finished = bool(status.get("finished"))
    reason = "" if finished else (f"exited early ({exception})" if exception else "exited before the program's end")
    return _answer("pass", reason=reason, exit_code=0, finished=finished, exception=exception, **out)


def _answer(verdict: str, *, stdout: bytes = b"", stderr: bytes = b"", **fields) -> dict:
    return {
        "verdict": verdict,
        "stdout": stdout.decode("utf-8", "replace"),
        "stderr": stderr.decode("utf-8", "replace"),
        **fields,
    }


def _emergency_status(fd: int, nonce: str, message: str) -> None:
    try:
        os.write(fd, (json.dumps({"nonce": nonce, "setup_error": message}) + "\n").encode())
    except OSError:
        pass


def _force_remove(function, path, _exc_info) -> None:
    """rmtree error hook: a program may have left read-only directories behind."""
    try:
        os.chmod(os.path.dirname(path), 0o700)
        function(path)
    except FileNotFoundError:
        pass


def supervise(config: dict) -> None:
    """Make the cgroup, enter the namespaces, fork the zygote, and clean up after it.

    The zygote ends when the caller closes its pipe or dies (end of file on
    stdin); this process then removes the cgroup. SIGTERM kills the zygote first.
    """
    root = os.geteuid() == 0
    missing: dict[str, str] = {}
    cgroup = None
    if config.get("cgroups") is False:
        missing["cgroup"] = "disabled"
    elif not root:
        missing["cgroup"] = "not root"
    else:
        try:
            cgroup = isolation.Cgroup(config["name"])
        except OSError as exc:
            missing["cgroup"] = str(exc)
    namespaces = False
    if config.get("namespaces") is False:
        missing.update({k: "disabled" for k in ("pid_namespace", "net_namespace", "mount_namespace")})
    else:
        try:
            isolation.unshare(isolation.NAMESPACES)
            namespaces = True
        except OSError as exc:
            missing.update({k: str(exc) for k in ("pid_namespace", "net_namespace", "mount_namespace")})
    tmp = "/tmp" if namespaces else tempfile.mkdtemp(prefix="trajkit-sandbox-")
    pid = os.fork()
    if pid == 0:
        zygote = Zygote(config, cgroup, namespaces, missing, tmp)
        try:
            write_message(1, {"ready": True, **zygote.setup()})
            while (request := read_message(0)) is not None:
                write_message(1, _serve(zygote, request))
            zygote.close()
        except BaseException:  # noqa: BLE001 - say why on stderr, then end the namespace with it
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    signal.signal(signal.SIGTERM, lambda *_: _kill_quietly(pid))
    try:
        os.waitpid(pid, 0)
    finally:
        if cgroup is not None:
            cgroup.remove()
        if not namespaces:
            shutil.rmtree(tmp, onerror=_force_remove)


def _serve(zygote: Zygote, request: dict) -> dict:
    try:
        return zygote.run(request)
    except Exception as exc:  # noqa: BLE001 - a fault of the sandbox itself (fork refused...): an error verdict
        isolation.kill_everything(zygote.namespaces)
        return _answer("error", reason=f"sandbox: {type(exc).__name__}: {exc}")


def _kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_once(path: str) -> None:
    """Run the one request in ``path`` with rlimits only and print the answer as JSON."""
    with open(path) as f:
        request = json.load(f)
    tmp = tempfile.mkdtemp(prefix="trajkit-sandbox-")
    zygote = Zygote(request.pop("config", {}), None, False, {}, tmp)
    zygote.setup()
    answer = _serve(zygote, request)
    zygote.close()
    shutil.rmtree(tmp, onerror=_force_remove)
    sys.stdout.write(json.dumps(answer))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--once"]:
        run_once(sys.argv[2])
    else:
        supervise(read_message(0))
