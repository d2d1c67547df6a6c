"""The sandbox worker's zygote: confines its own world once, then forks one confined child per program.

PID 1 of the worker's PID namespace and a member of its cgroup (``worker.py``
sets both up), it makes its root an allowlist of the host (read-only: the
runtime, ``_runtime``), mounts a private /tmp and pre-imports modules
(``setup``); per run it enters a new IPC namespace and resets the PID counter,
so that nothing a run leaves in the kernel reaches the next, and per program it
forks a *child* that sets rlimits, drops to the slot's uid with no capabilities
and no new privileges, and runs the program through ``harness.execute``
(``run``). The zygote enforces the wall-time limit and the output cap
(``outcome.watch``), then kills every process the program left behind (and
mounts a fresh /tmp) before answering. Standard library only; what it shares with a
Python MCP server's zygote is in ``zygote.py``.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import math
import os
import re
import resource
import shutil
import signal
import struct
import sys
import tempfile
import time

from . import harness, isolation, outcome, zygote


class Zygote:
    """Serves run requests: one confined child per program, everything it left killed afterwards."""

    def __init__(self, config: dict, cgroup: isolation.Cgroup | None, namespaces: bool, missing: dict, tmp: str):
        self.config = config
        self.cgroup = cgroup
        self.namespaces = namespaces
        self.missing = missing
        self.uid: int | None = config.get("uid")
        self.tmp = tmp  # /tmp in the mount namespace; else a private directory the supervisor removes
        self.last_pid: int | None = None  # /proc/sys/kernel/ns_last_pid of the PID namespace

    def setup(self) -> dict:
        """Confine this process's world; returns the protections in force and those missing."""
        if self.cgroup is not None:
            self.cgroup.limit_processes(int(self.config.get("max_procs", 64)) + 1)  # + the zygote
            self.cgroup.join()  # children are born in it: no per-program migration
            _oom_score_adj(-1000)  # under memory pressure, the program dies, never the zygote
        if self.namespaces:
            binds, covers = _runtime()
            try:
                isolation.confine_filesystem([*binds, *self.config.get("allow", [])], covers, self.tmp)
            except OSError as exc:
                self.missing["mount_namespace"] = f"cannot make the sandbox's root: {exc}"
            isolation.sethostname("sandbox")
            try:  # reset before each run: a PID tells nothing of the runs before
                self.last_pid = os.open("/proc/sys/kernel/ns_last_pid", os.O_WRONLY | os.O_CLOEXEC)
            except OSError as exc:
                self.missing["pid_namespace"] = f"cannot reset the PID counter between runs: {exc}"
        else:
            isolation.prctl(isolation.PR_SET_CHILD_SUBREAPER, 1)
        try:
            isolation.install_seccomp()  # inherited by every program's process
        except OSError as exc:
            self.missing["seccomp"] = str(exc)
        self._fresh_tmp()
        os.environ.update(HOME=self.tmp, TMPDIR=self.tmp)  # the rest was scrubbed by the caller
        tempfile.tempdir = self.tmp
        atexit._clear()  # programs run only their own exit handlers
        for name in self.config.get("preload", ()):
            self._preload(name)
        gc.freeze()
        os.chdir("/")
        if self.uid is None and "uid" not in self.missing:
            userns = " (in a user namespace, with no capabilities)" if self.config.get("user_namespace") else ""
            self.missing["uid"] = (
                "disabled"
                if self.config.get("drop_privileges") is False
                else f"not root: programs keep the caller's uid{userns}"
            )
        return {"missing": self.missing, "uid": self.uid, "tmp": self.tmp, "cgroup": self.cgroup is not None}

    def _fresh_tmp(self) -> None:
        size = int(self.config.get("tmp_mb", 64))
        if self.namespaces:
            isolation.mount_private_tmpfs(self.tmp, self.uid, size)  # /dev/shm is a link to it
            return
        shutil.rmtree(self.tmp, onerror=force_remove)
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

    def run(self, request: dict, next_message=None) -> dict:
        """Run one program; the answer says how it ended (the verdict) and what it printed.

        With ``tests`` (a dict, or True when they come as the next message,
        which the tests' process reads itself, so that no solution's process,
        forked from this one, ever holds them) the program is a solution served to the tests in a
        second process, whose end alone decides the verdict (``harness.py``).
        """
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
                return outcome.answer("error", reason=f"sandbox: cannot set cgroup limits: {exc}")
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        st_r, st_w = os.pipe()
        stdin_fd = _stdin_fd(request.get("stdin"))
        limits = _limits(timeout, memory_mb, max_procs, self.config, self.uid)
        if self.namespaces:  # the run's own System V and POSIX IPC objects, and PIDs from 2 up as in every run
            isolation.unshare(isolation.CLONE_NEWIPC)
            if self.last_pid is not None:
                os.pwrite(self.last_pid, b"1", 0)
        start = time.monotonic()
        solution = None
        if request.get("tests"):
            call_r, call_w = os.pipe()
            reply_r, reply_w = os.pipe()
            program = request["program"]
            solution = os.fork()
            if solution == 0:
                fds = {0: stdin_fd, 1: out_w, 2: err_w, 4: call_r, 5: reply_w}
                self._child(fds, limits, lambda: harness.serve(program, 4, 5))
            nonce = os.urandom(16).hex()
            pid = os.fork()
            if pid == 0:
                # the tests' own process reads them, still as root: the zygote, which forks every
                # later solution, never holds them
                tests = request["tests"] if isinstance(request["tests"], dict) else _read_or_exit(next_message)
                fds = {0: _stdin_fd(None), 1: out_w, 2: err_w, 3: st_w, 4: call_w, 5: reply_r}
                self._child(
                    fds,
                    limits,
                    lambda: harness.execute(
                        tests["program"], 3, nonce, lambda: harness.remote_functions(tests["names"], 4, 5)
                    ),
                    nonce,
                    trusted=True,
                )
            for fd in (call_r, call_w, reply_r, reply_w):
                os.close(fd)
        else:
            nonce = os.urandom(16).hex()
            pid = os.fork()
            if pid == 0:
                fds = {0: stdin_fd, 1: out_w, 2: err_w, 3: st_w}
                self._child(fds, limits, lambda: harness.execute(request["program"], 3, nonce), nonce)
        for fd in (out_w, err_w, st_w, stdin_fd):
            os.close(fd)
        try:
            cap = int(self.config.get("max_output_bytes", 1 << 20))
            watch = outcome.watch(pid, out_r, err_r, st_r, start + timeout, cap)
        finally:
            for fd in (out_r, err_r, st_r):
                os.close(fd)
        runtime = time.monotonic() - start
        wait_status, cpu_s = None, 0.0
        if watch["exited"]:
            _, wait_status, usage = os.wait4(pid, 0)
            cpu_s = usage.ru_utime + usage.ru_stime
            if solution is not None and not outcome.program_status(watch["status"], nonce).get("finished"):
                wait_status, cpu_s = _solution_end(solution, wait_status, cpu_s)
        isolation.kill_everything(self.namespaces)
        oom = self.cgroup is not None and self.cgroup.oom_kills() > oom_before
        try:
            self._fresh_tmp()
        except OSError as exc:
            return outcome.answer("error", reason=f"sandbox: cannot reset the private /tmp: {exc}")
        return outcome.classify(watch, wait_status, cpu_s, oom, nonce, timeout, memory_mb, runtime, limits)

    def _child(self, fds: dict[int, int], limits: dict, body, nonce: str = "", trusted: bool = False):
        """Confine this forked process (descriptors ``fds`` only, rlimits, the slot's uid), then run ``body``.

        The ``trusted`` tests' process is also made non-dumpable: the solution's
        process, under the same uid, can then neither trace it nor open its memory or descriptors.
        """
        status_fd = fds.get(3, 2)
        try:
            os.setsid()
            _oom_score_adj(1000)  # the first thing any out-of-memory killer takes
            zygote.place(fds)
            status_fd = 3 if 3 in fds else 2
            for fd in range(6):
                if fd not in fds:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            os.closerange(6, 1 << 16)
            for name, value in limits.items():
                resource.setrlimit(getattr(resource, name), (value, value))
            os.chdir(self.tmp)
            if self.uid is not None:
                isolation.drop_privileges(self.uid)
            elif self.config.get("user_namespace"):  # else it could remount the read-only host writable
                isolation.drop_capabilities()
            else:
                isolation.prctl(isolation.PR_SET_NO_NEW_PRIVS, 1)
            if trusted or self.config.get("user_namespace"):  # as root runs' uid change does by default
                isolation.prctl(isolation.PR_SET_DUMPABLE, 0)
            isolation.prctl(isolation.PR_SET_PDEATHSIG, signal.SIGKILL)
            zygote.forget()  # the program finds none of the worker's modules by name
        except BaseException as exc:  # noqa: BLE001 - never run a program that is not fully confined
            outcome.emergency_status(status_fd, nonce, f"{type(exc).__name__}: {exc}")
            os._exit(126)
        body()


def _runtime() -> tuple[list[str], list[str]]:
    """What every program may read of the host, and the site-packages folders laid over empty (the distributions
    the pool allows are put back in them): the interpreter (with the links to it and the venv's ``pyvenv.cfg``),
    its standard library, its dynamic loader, the folders of the shared libraries mapped into this process, the
    loader's cache and the time zone data (docs/sandbox.md, *what a program sees*)."""
    import sysconfig

    here = sysconfig.get_paths()
    base = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})
    binds = [here["stdlib"], here["platstdlib"], sys.executable, os.path.join(sys.prefix, "pyvenv.cfg")]
    binds += [_loader(sys.executable), *_library_folders(), "/etc/ld.so.cache", "/usr/share/zoneinfo"]
    covers = {p for paths in (here, base) for p in (paths["purelib"], paths["platlib"])}
    covers |= {p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")}
    return [b for b in binds if b and os.path.exists(b)], sorted(covers)


def _library_folders() -> list[str]:
    """The folders of the shared libraries mapped into this process (the C library's, the interpreter's), but
    those in a site-packages folder."""
    folders = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = "".join(line.rstrip("\n").split(None, 5)[5:])
            shared_object = re.search(r"^/.*\.so(\.[0-9.]+)?$", path)
            if shared_object and not re.search(r"/(site|dist)-packages/", path):
                folders.add(os.path.dirname(path))
    return sorted(folders)


def _loader(executable: str) -> str | None:
    """The dynamic loader a 64-bit ELF executable names (its ``PT_INTERP``, e.g. /lib64/ld-linux-x86-64.so.2), for
    a program that starts the interpreter again."""
    with open(os.path.realpath(executable), "rb") as f:
        head = f.read(64)
        if head[:5] != b"\x7fELF\x02":
            return None
        order = "<" if head[5] == 1 else ">"
        (table,), (size, count) = struct.unpack_from(order + "Q", head, 32), struct.unpack_from(order + "HH", head, 54)
        for i in range(count):
            f.seek(table + i * size)
            kind, _, offset, _, _, length = struct.unpack(order + "IIQQQQ", f.read(40))
            if kind == 3:  # PT_INTERP
                f.seek(offset)
                return f.read(length).rstrip(b"\0").decode()
    return None


def _read_or_exit(next_message) -> dict:
    try:
        tests = next_message()
    except BaseException:  # noqa: BLE001 - the zygote sees a run without a status: an error
        os._exit(126)
    if not isinstance(tests, dict):
        os._exit(126)
    return tests


def _solution_end(pid: int, wait_status: int, cpu_s: float) -> tuple[int, float]:
    """When the tests did not finish because the solution's process was killed (CPU limit, out of memory),
    that end is the one that tells the verdict."""
    try:
        done, status, usage = os.wait4(pid, os.WNOHANG)
    except ChildProcessError:
        return wait_status, cpu_s
    if done and os.WIFSIGNALED(status):
        return status, usage.ru_utime + usage.ru_stime
    return wait_status, cpu_s


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


def force_remove(function, path, _exc_info) -> None:
    """rmtree error hook: a program may have left read-only directories behind."""
    try:
        os.chmod(os.path.dirname(path), 0o700)
        function(path)
    except FileNotFoundError:
        pass
