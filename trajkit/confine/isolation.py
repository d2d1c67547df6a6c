"""Linux confinement primitives for the jail: namespaces, mounts, cgroups, credentials, seccomp.

Standard library only (``ctypes`` for the system calls Python 3.11's ``os``
lacks), as all of this package. Every function raises ``OSError`` when the
kernel refuses; the caller (the sandbox worker, a server's launcher) decides what a refusal
means: ``require`` is the one downgrade rule for code and MCP servers alike.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import re
import signal
import stat
import time

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
NAMESPACES = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNET

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND = 32, 1024, 2048, 4096
MS_REC, MS_PRIVATE, MS_RELATIME, MS_STRICTATIME = 16384, 1 << 18, 1 << 21, 1 << 24
MNT_DETACH = 2
_OPTION_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
    "strictatime": MS_STRICTATIME,
}
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 36, 38
PR_CAPBSET_DROP, PR_SET_SECUREBITS = 24, 28
# securebits: root gains no capabilities on execve, uid changes never touch them, ambient ones cannot be raised;
# each locked (KEEP_CAPS off and locked)
_SECUREBITS = 0b11101111


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_libc.sethostname.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
_libc.syscall.restype = ctypes.c_long


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


ALLOW_WEAKER_FLAG = "--allow-weaker-sandbox"
ALLOW_WEAKER_ENV = "TRAJKIT_ALLOW_WEAKER_SANDBOX"  # set by the flag, so that every process of a run follows it


class ProtectionMissing(RuntimeError):
    """A protection the machine cannot give, and the user did not accept running without it."""


def weaker_allowed() -> bool:
    """Whether the user passed ``--allow-weaker-sandbox`` (for this process and those it starts)."""
    return os.environ.get(ALLOW_WEAKER_ENV) == "1"


def require(protection: str, missing: str | None, allow_weaker: bool | None = None) -> None:
    """The one downgrade rule: ``missing`` (why ``protection`` cannot be given, None when it can) stops
    the start with one line naming the protection, unless the user passed ``--allow-weaker-sandbox``
    (``allow_weaker``; None reads the flag's environment variable)."""
    allowed = weaker_allowed() if allow_weaker is None else allow_weaker
    if missing is not None and not allowed:
        raise ProtectionMissing(
            f"sandbox: this machine cannot give {protection} ({missing}); "
            f"pass {ALLOW_WEAKER_FLAG} to run without {'them' if ', ' in protection else 'it'}"
        )


def _b(value: str | None) -> bytes | None:
    return None if value is None else value.encode()


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def enter_namespaces(flags: int, user: bool = False) -> bool:
    """Enter new ``flags`` namespaces; returns whether a user namespace was made for them.

    Root enters them as they are (unless ``user``). Any other user cannot (they need CAP_SYS_ADMIN), so it first
    gets a user namespace of its own that owns the others, and maps its uid and gid there to
    themselves (user_namespaces(7): ``setgroups`` denied before the gid map). The process then
    holds every capability, but only over those namespaces (mounts, hostname), and only until
    ``drop_capabilities`` or an ``execve`` (its uid is not 0 there); files keep their owners.
    """
    if os.geteuid() == 0 and not user:
        unshare(flags)
        return False
    uid, gid = os.geteuid(), os.getegid()
    unshare(CLONE_NEWUSER | flags)
    for name, line in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        _write(f"/proc/self/{name}", line)
    return True


def own_proc_refused() -> bool:
    """Whether new mount and PID namespaces (a user namespace's when not root) are refused a /proc of their
    own, tried in a child. The kernel refuses a user namespace where parts of the host's /proc are masked
    (a container's), and the host's would show the host's processes."""
    pid = os.fork()
    if pid == 0:
        try:
            enter_namespaces(CLONE_NEWNS | CLONE_NEWPID)
            mount(None, "/", None, MS_REC | MS_PRIVATE)
            init = os.fork()  # PID 1 of the new namespace
            if init == 0:
                try:
                    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
                    os._exit(0)
                except OSError:
                    os._exit(1)
            os._exit(os.waitstatus_to_exitcode(os.waitpid(init, 0)[1]))
        except OSError:
            os._exit(0)  # no namespaces at all: the caller finds out (and says why) when it enters them
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0


OWN_PROC_REFUSED = (
    "a user namespace may not mount its own /proc here (parts of the host's are masked, as in a container)"
)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """Give up every capability for good: the bounding set emptied, securebits locked so that no
    ``execve`` grants any back, the sets cleared, and no new privileges."""
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            if ctypes.get_errno() == errno.EINVAL:  # past the kernel's last capability
                break
            _check(-1, f"drop capability {cap}")
    prctl(PR_SET_SECUREBITS, _SECUREBITS)
    _check(_libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), (_CapData * 2)()), "capset")
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(_b(source), _b(target), _b(fstype), flags, _b(data)), f"mount {target}")


def umount(target: str) -> None:
    _check(_libc.umount2(_b(target), MNT_DETACH), f"umount {target}")


def prctl(option: int, value: int) -> None:
    _check(_libc.prctl(option, value, 0, 0, 0), f"prctl {option}")


def sethostname(name: str) -> None:
    _check(_libc.sethostname(name.encode(), len(name)), "sethostname")


def _unescape(path: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def mounts() -> list[tuple[str, int]]:
    """Mount points of this mount namespace with their per-mount flags, parents first."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            flags = 0
            for option in fields[5].split(","):
                flags |= _OPTION_FLAGS.get(option, 0)
            found.append((_unescape(fields[4]), flags))
    return sorted(set(found), key=lambda m: m[0].count("/"))


def confine_filesystem(binds: list[str], covers: list[str], tmp: str) -> None:
    """Make this mount namespace's root an allowlist, and enter it.

    The new root is an empty tmpfs holding: each of ``binds`` (a file or a folder of the host) at its own
    path, with the symbolic links met on the way to it; each of ``covers`` (a folder inside one of
    ``binds``, site-packages say) laid over with an empty tmpfs, the ``binds`` inside it put back; a fresh
    /proc; the devices null, zero, full, random and urandom (``own_devices``), and /dev/fd, /dev/stdin,
    /dev/stdout, /dev/stderr and /dev/shm (a link to ``tmp``); and an empty folder ``tmp`` for the private
    tmpfs (``mount_private_tmpfs``). It then becomes the root (``pivot_root``), the host's is let go of, and
    every mount but /proc is made read-only and nosuid. Nothing else of the host can be reached.
    """
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    links: dict[str, str] = {}
    devices = [f"/dev/{name}" for name in ("null", "zero", "full", "random", "urandom")]
    plan = sorted(
        {(_resolve(c, links), "cover") for c in covers if os.path.isdir(c)}
        | {(_resolve(b, links), "bind") for b in [*binds, *devices] if os.path.exists(b)},
        key=lambda item: (item[0].count("/"), item[1] == "bind", item[0]),  # a cover before what goes in it
    )
    copies = {path: detached_copy(path) for path, kind in plan if kind == "bind"}  # before /tmp is covered
    staging = "/tmp"  # the host's /tmp is left behind with the rest
    mount("tmpfs", staging, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    made = own_devices(staging + "/dev", [d for d in devices if os.path.exists(d)])
    placed: dict[str, str] = {"/": "root"}

    def writable_parent(path: str) -> bool:  # (a bound folder is the host's own: nothing is made in it)
        return placed[max((p for p in placed if path.startswith(p.rstrip("/") + "/")), key=len)] != "bind"

    for path, kind in plan:
        target = staging + path
        if path in made:
            os.close(copies.pop(path))
            continue
        if not writable_parent(path):  # inside a folder bound whole: a bind is there already
            if kind == "bind" or not os.path.isdir(target):
                if kind == "bind":
                    os.close(copies.pop(path))
                continue
        elif kind == "cover" or os.path.isdir(f"/proc/self/fd/{copies[path]}"):
            os.makedirs(target, 0o755, exist_ok=True)
        else:  # a file's mount point
            os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
        if kind == "cover":
            mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
        else:
            attach(copies.pop(path), target)
        placed[path] = kind
    for path, target in sorted(links.items()):
        if writable_parent(path) and not os.path.lexists(staging + path):
            os.makedirs(os.path.dirname(staging + path), 0o755, exist_ok=True)
            os.symlink(target, staging + path)
    os.makedirs(staging + "/proc", 0o555, exist_ok=True)
    mount("proc", staging + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    dev = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"}
    os.makedirs(staging + "/dev", 0o755, exist_ok=True)
    for name, target in {**dev, "shm": tmp}.items():
        if not os.path.lexists(f"{staging}/dev/{name}"):  # (an interpreter living in /dev/shm has it bound)
            os.symlink(target, f"{staging}/dev/{name}")
    os.makedirs(staging + tmp, 0o755, exist_ok=True)
    os.chdir(staging)
    _check(_libc.syscall(_SYS_PIVOT_ROOT[_machine()], b".", b"."), "pivot_root")
    umount(".")  # the host's root, stacked under the new one
    os.chdir("/")
    for target, flags in mounts():
        if not re.match(r"^/proc(/|$)", target):
            mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | flags)


def own_devices(folder: str, devices: list[str]) -> list[str]:
    """Make ``devices`` (the host's, by path) anew in a tmpfs at ``folder``, the nodes of this mount namespace's
    own; returns them, or none where the kernel refuses (``mknod`` needs CAP_MKNOD in the first user namespace:
    root; the host's are bound then). A lock is the inode's: on a device bound from the host, one that a run holds
    is seen by a run on another worker at the same time (a write lock on /dev/null refused, a value passed); on a
    node of its own, by none."""
    os.makedirs(folder, 0o755)
    mount("tmpfs", folder, "tmpfs", MS_NOSUID, "size=1m,mode=0755")  # (nodev off: the nodes must open)
    try:
        for path in devices:
            node = f"{folder}/{os.path.basename(path)}"
            os.mknod(node, 0o666 | stat.S_IFCHR, os.stat(path).st_rdev)
            os.chmod(node, 0o666)  # (past the umask)
    except PermissionError:
        umount(folder)
        return []
    return devices


def _resolve(path: str, links: dict[str, str]) -> str:
    """The real path of ``path``; each symbolic link on the way is added to ``links`` (where it is: its target)."""
    parts, current, hops = [p for p in path.split("/") if p], "/", 0
    while parts:
        part = parts.pop(0)
        if part in (".", ".."):
            current = os.path.dirname(current) if part == ".." else current
            continue
        candidate = os.path.join(current, part)
        if os.path.islink(candidate):
            hops += 1
            if hops > 40:
                raise OSError(errno.ELOOP, f"too many symbolic links on the way to {path}")
            target = os.readlink(candidate)
            links[candidate] = target
            parts = [p for p in target.split("/") if p] + parts
            current = "/" if target.startswith("/") else current
            continue
        current = candidate
    return current


_SYS_OPEN_TREE, _SYS_MOVE_MOUNT = 428, 429  # the same number on every architecture (Linux >= 5.2)
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
_AT_FDCWD, _OPEN_TREE_CLONE, _AT_RECURSIVE, _MOVE_MOUNT_F_EMPTY_PATH = -100, 1, 0x8000, 4


def _machine() -> str:
    return os.uname().machine


def detached_copy(path: str) -> int:
    """A copy of the mount tree at ``path`` (a folder or a file), attached nowhere yet (``open_tree``)."""
    fd = _libc.syscall(_SYS_OPEN_TREE, _AT_FDCWD, path.encode(), _OPEN_TREE_CLONE | _AT_RECURSIVE | os.O_CLOEXEC)
    if fd < 0:
        _check(fd, f"open_tree {path}")
    return fd


def attach(fd: int, target: str) -> None:
    """Attach a ``detached_copy`` at ``target`` (which must exist), and close it."""
    _check(_libc.syscall(_SYS_MOVE_MOUNT, fd, b"", _AT_FDCWD, target.encode(), _MOVE_MOUNT_F_EMPTY_PATH), "move_mount")
    os.close(fd)


def mount_private_tmpfs(target: str, uid: int | None, size_mb: int) -> None:
    """Mount a fresh tmpfs at ``target`` owned by ``uid`` (mode 0700), replacing one mounted there before.

    Fresh every time: an empty tmpfs still carries what a program did to it (the times and extended
    attributes of its root, the number of inodes it ever made), each a way to pass a value to the next run.
    """
    with contextlib.suppress(OSError):
        umount(target)
    owner = f",uid={uid},gid={uid}" if uid is not None else ""
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size_mb}m,mode=0700{owner}")


def drop_privileges(uid: int) -> None:
    """Become ``uid``/``gid`` for good: no supplementary groups, no capabilities, no new privileges."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid`` (a scan of /proc; works without CONFIG_PROC_CHILDREN)."""
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                line = f.read()
        except OSError:
            continue
        fields = line[line.rfind(b")") + 2 :].split()
        if int(fields[1]) == pid:
            kids.append(int(entry))
    return kids


def reap_exited() -> bool:
    """Collect every exited child without blocking; whether any child is still running."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def kill_everything(init_of_namespace: bool) -> None:
    """Kill and reap every process the last sample left behind.

    As init of a PID namespace, ``kill(-1)`` reaches every other process in it, and a blocking wait returns as
    soon as one is gone (each one's children are then this process's: none is missed, and no time is spent
    polling). Otherwise this process is a child subreaper: every descendant of a sample, daemonized or not,
    becomes its child once its own parent dies, so killing children until none remain kills them all.
    """
    me = os.getpid()
    while True:
        if init_of_namespace:
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                return
            continue
        for child in children_of(me):
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not reap_exited():
            return
        time.sleep(0.0005)


class Cgroup:
    """A memory and pids cgroup (v1 or v2) holding one worker's samples, below this process's own."""

    def __init__(self, name: str):
        self.dirs: list[str] = []
        self.version = 1 if _v1_mount("memory") else 2
        try:
            if self.version == 1:
                for controller in ("memory", "pids"):
                    self.dirs.append(_make_dir(_v1_mount(controller), _own_path(controller), name))
            else:
                self.dirs.append(_make_v2_dir(name))
        except (OSError, TypeError) as exc:
            self.remove()
            raise OSError(f"no writable cgroup: {exc}") from None
        # Held open: the sandbox then hides /sys/fs/cgroup from programs and still reaches its own cgroup.
        self.fds = [os.open(d, os.O_RDONLY | os.O_DIRECTORY) for d in self.dirs]
        self.parents = [
            (os.open(os.path.dirname(d), os.O_RDONLY | os.O_DIRECTORY), os.path.basename(d)) for d in self.dirs
        ]

    def _file(self, controller: str, name: str) -> str:
        fd = self.fds[0 if self.version == 2 or controller == "memory" else 1]
        return f"/proc/self/fd/{fd}/{name}"

    def limit_processes(self, max_procs: int) -> None:
        _write(self._file("pids", "pids.max"), max_procs)

    def limit_memory(self, memory_bytes: int) -> None:
        """Allow the program ``memory_bytes`` on top of what the zygote (a member) already uses."""
        usage_file = "memory.usage_in_bytes" if self.version == 1 else "memory.current"
        with open(self._file("memory", usage_file)) as f:
            limit = int(f.read()) + memory_bytes
        if self.version == 1:
            memory, swap = (
                self._file("memory", "memory.limit_in_bytes"),
                self._file("memory", "memory.memsw.limit_in_bytes"),
            )
            order = [memory, swap] if os.path.exists(swap) else [memory]
            try:
                for path in order:
                    _write(path, limit)
            except OSError:  # memory+swap may never sit below memory: raise it first
                for path in reversed(order):
                    _write(path, limit)
        else:
            _write(self._file("memory", "memory.max"), limit)
            swap = self._file("memory", "memory.swap.max")
            if os.path.exists(swap):
                _write(swap, 0)

    def join(self) -> None:
        """Move the calling process into the cgroup (writing 0 means "myself"); its children are born there."""
        for fd in self.fds:
            _write(f"/proc/self/fd/{fd}/cgroup.procs", 0)

    def oom_kills(self) -> int:
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            with open(self._file("memory", name)) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except OSError:
            pass
        return 0

    def remove(self) -> None:
        for parent, name in getattr(self, "parents", None) or [(None, d) for d in self.dirs]:
            for _ in range(50):
                try:
                    os.rmdir(name, dir_fd=parent)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def _write(path: str, value: object) -> None:
    with open(path, "w") as f:
        f.write(str(value))


def _cgroup_lines() -> list[tuple[str, str]]:
    with open("/proc/self/cgroup") as f:
        return [(parts[1], parts[2]) for parts in (line.rstrip("\n").split(":", 2) for line in f)]


def _own_path(controller: str) -> str:
    for controllers, path in _cgroup_lines():
        if controller in controllers.split(","):
            return path
    raise OSError(f"not in a {controller} cgroup")


def _v1_mount(controller: str) -> str | None:
    with open("/proc/self/mountinfo") as f:
        for line in f:
            head, _, tail = line.partition(" - ")
            fstype, _, options = tail.split()[:3]
            if fstype == "cgroup" and controller in options.split(","):
                return _unescape(head.split()[4])
    return None


def _make_dir(mount_point: str | None, own: str, name: str) -> str:
    if mount_point is None:
        raise OSError("controller not mounted")
    parent = os.path.join(mount_point, own.lstrip("/"))
    _remove_stale(parent, name)
    path = os.path.join(parent, name)
    os.mkdir(path)
    return path


def _remove_stale(parent: str, name: str) -> None:
    """Remove cgroups left by killed workers: those of dead callers, and this slot's earlier ones.

    Names are ``trajkit-<caller pid>-<slot>-<serial>``; rmdir only ever removes an empty cgroup.
    """
    caller, slot = name.split("-")[1:3]
    for entry in os.listdir(parent):
        parts = entry.split("-")
        if len(parts) != 4 or parts[0] != "trajkit" or entry == name:
            continue
        mine = parts[1] == caller and parts[2] == slot
        if mine or not os.path.exists(f"/proc/{parts[1]}"):
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(parent, entry))


def _make_v2_dir(name: str) -> str:
    with open("/proc/self/mountinfo") as f:
        mount_point = next((_unescape(ln.split()[4]) for ln in f if " - cgroup2 " in ln), None)
    own = next((path for controllers, path in _cgroup_lines() if controllers == ""), None)
    if mount_point is None or own is None:
        raise OSError("no cgroup2 hierarchy")
    parent = os.path.join(mount_point, own.lstrip("/"))
    with open(os.path.join(parent, "cgroup.subtree_control")) as f:
        enabled = set(f.read().split())
    if not {"memory", "pids"} <= enabled:
        _write(os.path.join(parent, "cgroup.subtree_control"), "+memory +pids")
    return _make_dir(mount_point, own, name)


# seccomp, inherited by every process forked or executed after it is installed. The keyring calls fail for
# programs and servers alike: keyrings are not namespaced (a process inherits its caller's session keyring, whose
# keys hold credentials, and a uid's user keyring is shared by all its processes), so a key added in one run would
# be there for the next. Programs also may not create user namespaces (inside one, an unprivileged process gets
# mount and network namespaces of its own), nor sockets of any family but AF_UNIX: what a socket of another family
# can change in a network namespace (its counters, IPv6 flow labels), or outside any (vsock), outlives the
# process, and a worker keeps its network namespace from one run to the next. Nor may programs watch files
# (inotify, fanotify, dnotify: ``F_NOTIFY``), take ``flock`` locks, ask who holds a lock (``F_GETLK``,
# ``F_OFD_GETLK``) or take leases: the runtime's files are the same inodes in every worker's root, so a run could
# see a lock another run holds on them, or be woken by another's reads, while both run. These fail as on a kernel
# built without them (ENOSYS for the calls, EINVAL for the ``fcntl`` commands); ``fcntl`` locks themselves stay
# (sqlite's): on a file opened read-only, only a read lock can be taken, which no other read lock sees.
_SECCOMP_ARCH = {  # arch, unshare, clone, (add_key, request_key, keyctl), (socket, socketpair), fcntl,
    # (flock, inotify_init, inotify_init1, fanotify_init)
    "x86_64": (0xC000003E, 272, 56, (248, 249, 250), (41, 53), 72, (73, 253, 294, 300)),
    "aarch64": (0xC00000B7, 97, 220, (217, 218, 219), (198, 199), 25, (32, 26, 262)),
}
_F_GETLK, _F_OFD_GETLK, _F_SETLEASE, _F_NOTIFY = 5, 36, 1024, 1026
_SYS_CLONE3, _CLONE_NEWUSER, _X32_BIT, _AF_UNIX = 435, 0x10000000, 0x40000000, 1
_LD, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL, _ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def install_seccomp(programs: bool = True) -> None:
    """Install a seccomp filter: the keyring calls fail with EPERM, other ABIs' system calls are refused (x32
    with ENOSYS), and with ``programs`` (code under test, not a server): ``unshare``/``clone`` with
    CLONE_NEWUSER fail with EPERM, ``clone3`` with ENOSYS (the C library then falls back to ``clone``),
    ``socket``/``socketpair`` of any family but AF_UNIX with EAFNOSUPPORT, ``flock`` and the ``inotify`` and
    ``fanotify`` calls with ENOSYS, and the ``fcntl`` commands that ask who holds a lock, take a lease or watch a
    folder with EINVAL."""
    _check(_raw_prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(_seccomp_program(programs)), 0, 0), "seccomp")


_raw_prctl = ctypes.CDLL(None, use_errno=True).prctl  # (no argtypes: its third argument is a pointer here)


@functools.cache
def _seccomp_program(programs: bool) -> _SockFprog:
    """The filter, built once per process (a fork server's instances then only install it: building costs about a
    millisecond in a freshly forked child)."""
    if _machine() not in _SECCOMP_ARCH:
        raise OSError(f"no seccomp filter for {_machine()}")
    arch, unshare_nr, clone_nr, keyrings, sockets, fcntl_nr, absent = _SECCOMP_ARCH[_machine()]
    code: list = [(_LD, 0, 0, 4), (_JEQ, 1, 0, arch), (_RET, 0, 0, _KILL), (_LD, 0, 0, 0)]
    code += [(_JGE, "enosys", 0, _X32_BIT), *[(_JEQ, "eperm", 0, nr) for nr in keyrings]]
    if programs:
        code += [(_JEQ, "enosys", 0, _SYS_CLONE3), (_JEQ, "ns", 0, unshare_nr), (_JEQ, "ns", 0, clone_nr)]
        code += [(_JEQ, "socket", 0, nr) for nr in sockets]
        code += [*[(_JEQ, "enosys", 0, nr) for nr in absent], (_JEQ, "fcntl", 0, fcntl_nr)]
    code += [(_RET, 0, 0, _ALLOW)]
    if programs:  # the low half of the first argument: clone's flags, the socket's family
        code += ["ns", (_LD, 0, 0, 16), (_JSET, "eperm", 0, _CLONE_NEWUSER), (_RET, 0, 0, _ALLOW)]
        code += ["socket", (_LD, 0, 0, 16), (_JEQ, 0, "eafnosupport", _AF_UNIX), (_RET, 0, 0, _ALLOW)]
        code += ["fcntl", (_LD, 0, 0, 24)]  # the low half of the second argument: the command
        code += [(_JEQ, "einval", 0, cmd) for cmd in (_F_GETLK, _F_OFD_GETLK, _F_SETLEASE, _F_NOTIFY)]
        code += [(_RET, 0, 0, _ALLOW), "einval", (_RET, 0, 0, _ERRNO | errno.EINVAL)]
    code += ["enosys", (_RET, 0, 0, _ERRNO | errno.ENOSYS), "eperm", (_RET, 0, 0, _ERRNO | errno.EPERM)]
    code += ["eafnosupport", (_RET, 0, 0, _ERRNO | errno.EAFNOSUPPORT)]
    program = _assemble(code)
    filters = (_SockFilter * len(program))(*[_SockFilter(*ins) for ins in program])
    prog = _SockFprog(len(program), filters)
    return prog


def _assemble(code: list) -> list[tuple[int, int, int, int]]:
    """BPF instructions from ``code``, where a string marks a place and a jump may name one (forward only)."""
    places, position = {}, 0
    for item in code:
        if isinstance(item, str):
            places[item] = position
        else:
            position += 1
    program = [item for item in code if not isinstance(item, str)]

    def offset(jump: int | str, at: int) -> int:
        return jump if isinstance(jump, int) else places[jump] - at - 1

    return [(op, offset(jt, i), offset(jf, i), k) for i, (op, jt, jf, k) in enumerate(program)]
