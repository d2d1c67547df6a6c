"""Ways one process could leave a value (1..255) for a later one through what the kernel keeps: ``plant`` writes it
through each channel, ``look`` reads what each holds now (None: nothing there, or the channel is closed).

Standard library only: sandbox programs run this file's text, and ``channels.py`` serves it as an MCP server.
System V message queue, semaphore and shared memory; a POSIX message queue (made by ``mq_open``, and through
the mqueue file system at /dev/mqueue); files in /dev/shm and /tmp; the
times, an extended attribute and the inode counter of /tmp's file system; the PID counter; the network
namespace's counters; the session and user keyrings; the hostname; an abstract Unix socket and a file lock held by
a process left running (a daemon).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import struct
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.syscall.restype = ctypes.c_long
KEY = 0x7A1C0DE  # System V key
NAME = b"/trajkit-channel"  # POSIX message queue
FILES = {"posix_shm": "/dev/shm/trajkit-channel", "tmp_file": "/tmp/trajkit-channel"}
SOCKET = b"\0trajkit-channel"
LOCKED = "/proc/self/exe"  # (opened read-only: a lock needs no write access)
_KEYCTL = {"x86_64": (248, 250), "aarch64": (217, 219)}[os.uname().machine]  # add_key, keyctl
_SESSION, _USER = -3, -4
IPC_CREAT, IPC_NOWAIT, GETVAL, SETVAL = 0o1000, 0o4000, 12, 16
VALUE = 9  # what the tests plant: no fresh run or instance holds it by chance, and few forks reach it as a PID


def _ok(result: int) -> int:
    if result == -1:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return result


class _Message(ctypes.Structure):
    _fields_ = [("mtype", ctypes.c_long), ("mtext", ctypes.c_char * 1)]


def _plant_sysv_msg(value: int) -> None:
    queue = _ok(libc.msgget(KEY, IPC_CREAT | 0o666))
    _ok(libc.msgsnd(queue, ctypes.byref(_Message(value, b"x")), 1, IPC_NOWAIT))


def _look_sysv_msg() -> int | None:
    queue = libc.msgget(KEY, 0)
    message = _Message()
    if queue == -1 or libc.msgrcv(queue, ctypes.byref(message), 1, 0, IPC_NOWAIT) == -1:
        return None
    libc.msgsnd(queue, ctypes.byref(message), 1, IPC_NOWAIT)  # put back
    return message.mtype


def _plant_sysv_shm(value: int) -> None:
    address = libc.shmat(_ok(libc.shmget(KEY, 4096, IPC_CREAT | 0o666)), None, 0)
    ctypes.memset(address, value, 1)
    libc.shmdt(ctypes.c_void_p(address))


def _look_sysv_shm() -> int | None:
    segment = libc.shmget(KEY, 0, 0)
    if segment == -1:
        return None
    address = libc.shmat(segment, None, 0o10000)  # SHM_RDONLY
    value = ctypes.c_ubyte.from_address(address).value
    libc.shmdt(ctypes.c_void_p(address))
    return value or None


def _plant_sysv_sem(value: int) -> None:
    _ok(libc.semctl(_ok(libc.semget(KEY, 1, IPC_CREAT | 0o666)), 0, SETVAL, ctypes.c_int(value)))


def _look_sysv_sem() -> int | None:
    semaphore = libc.semget(KEY, 1, 0)
    return None if semaphore == -1 else (libc.semctl(semaphore, 0, GETVAL) or None)


def _plant_posix_mq(value: int) -> None:
    queue = _ok(libc.mq_open(NAME, os.O_CREAT | os.O_RDWR | os.O_NONBLOCK, 0o666, None))
    _ok(libc.mq_send(queue, b"x", 1, value))
    libc.mq_close(queue)


def _look_posix_mq() -> int | None:
    queue = libc.mq_open(NAME, os.O_RDWR | os.O_NONBLOCK)
    if queue == -1:
        return None
    buffer, priority = ctypes.create_string_buffer(1 << 16), ctypes.c_uint()
    got = libc.mq_receive(queue, buffer, len(buffer), ctypes.byref(priority))
    if got != -1:
        libc.mq_send(queue, buffer, got, priority.value)  # put back
    libc.mq_close(queue)
    return None if got == -1 else priority.value


def _plant_mqueue_fs(value: int) -> None:
    """A POSIX message queue made through the mqueue file system at /dev/mqueue, whichever IPC namespace it shows."""
    with open(f"/dev/mqueue/trajkit-channel-{value}", "w"):
        pass


def _look_mqueue_fs() -> int | None:
    names = [n for n in os.listdir("/dev/mqueue") if n.startswith("trajkit-channel-")]
    return int(names[0].rsplit("-", 1)[1]) if names else None


def _plant_file(path: str, value: int) -> None:
    with open(path, "w") as f:
        f.write(str(value))


def _look_file(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def _plant_tmp_times(value: int) -> None:
    os.utime("/tmp", (value, value))


def _look_tmp_times() -> int | None:
    return int(os.stat("/tmp").st_mtime)


def _plant_tmp_xattr(value: int) -> None:
    os.setxattr("/tmp", "user.trajkit", bytes([value]))


def _look_tmp_xattr() -> int | None:
    try:
        return os.getxattr("/tmp", "user.trajkit")[0]
    except OSError:
        return None


def _tmpfile_inode() -> int:
    fd = os.open("/tmp", os.O_TMPFILE | os.O_RDWR, 0o600)
    try:
        return os.fstat(fd).st_ino
    finally:
        os.close(fd)


def _plant_tmp_inodes(value: int) -> None:
    while (_tmpfile_inode() + 1) % 256 != value:  # the next inode made carries the value
        pass


def _look_tmp_inodes() -> int | None:
    return _tmpfile_inode() % 256


def _child_pid() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def _plant_pid(value: int) -> None:
    while (_child_pid() + 1) % 256 != value:  # the next process made (the next run's, say) carries the value
        pass


def _look_pid() -> int | None:
    return os.getpid() % 256


def _net_counter() -> int:
    """Packets sent, and those that found no route, in this network namespace."""
    with open("/proc/net/snmp") as f:
        lines = [line.split() for line in f]
    fields = {f"{a[0]}{k}": int(v) for a, b in zip(lines[::2], lines[1::2]) for k, v in zip(a[1:], b[1:])}
    return fields["Ip:OutNoRoutes"] + fields["Udp:OutDatagrams"]


def _plant_net(value: int) -> None:
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _ in range(1024):
            if _net_counter() % 256 == value:
                return
            try:
                sender.sendto(b"x", ("127.0.0.1", 9))
            except OSError:
                pass
        raise OSError(errno.EIO, "the counters do not move")
    finally:
        sender.close()


def _look_net() -> int | None:
    return _net_counter() % 256


def _plant_keyring(value: int) -> None:
    for ring in (_SESSION, _USER):
        _ok(libc.syscall(_KEYCTL[0], b"user", b"trajkit-channel", bytes([value]), 1, ring))


def _look_keyring() -> int | None:
    for ring in (_SESSION, _USER):
        key = libc.syscall(_KEYCTL[1], 10, ring, b"user", b"trajkit-channel", 0)  # KEYCTL_SEARCH
        buffer = ctypes.create_string_buffer(8)
        if key > 0 and libc.syscall(_KEYCTL[1], 11, key, buffer, 8) == 1:  # KEYCTL_READ
            return buffer.raw[0]
    return None


def _plant_hostname(value: int) -> None:
    name = f"trajkit-{value}".encode()
    _ok(libc.sethostname(name, len(name)))


def _look_hostname() -> int | None:
    name = os.uname().nodename
    return int(name[8:]) if name.startswith("trajkit-") and name[8:].isdigit() else None


def _plant_daemon(value: int) -> None:
    """A process left running (its own session, reparented) that answers on an abstract Unix socket and holds a
    lock on byte ``value`` of a file."""
    ready_r, ready_w = os.pipe()
    if os.fork() == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                server = socket.socket(socket.AF_UNIX)
                server.bind(SOCKET)
                server.listen(8)
                locked = os.open(LOCKED, os.O_RDONLY)
                fcntl.lockf(locked, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, value)
                os.write(ready_w, b"1")
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    conn, _ = server.accept()
                    conn.sendall(bytes([value]))
                    conn.close()
        finally:
            os._exit(0)
    os.close(ready_w)
    if os.read(ready_r, 1) != b"1":
        raise OSError(errno.ESRCH, "the daemon did not start")
    os.close(ready_r)


def _look_abstract_socket() -> int | None:
    client = socket.socket(socket.AF_UNIX)
    try:
        client.settimeout(2)
        client.connect(SOCKET)
        return client.recv(1)[0]
    except OSError:
        return None
    finally:
        client.close()


def _look_file_lock() -> int | None:
    fd = os.open(LOCKED, os.O_RDONLY)
    try:
        for value in range(1, 256):
            query = struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, value, 1, 0)  # who holds byte ``value``?
            if struct.unpack("hhqqi4x", fcntl.fcntl(fd, fcntl.F_GETLK, query))[0] != fcntl.F_UNLCK:
                return value
        return None
    finally:
        os.close(fd)


PLANTS = {
    "sysv_msg": _plant_sysv_msg,
    "sysv_shm": _plant_sysv_shm,
    "sysv_sem": _plant_sysv_sem,
    "posix_mq": _plant_posix_mq,
    "mqueue_fs": _plant_mqueue_fs,
    **{name: (lambda value, path=path: _plant_file(path, value)) for name, path in FILES.items()},
    "tmp_times": _plant_tmp_times,
    "tmp_xattr": _plant_tmp_xattr,
    "tmp_inodes": _plant_tmp_inodes,
    "pid": _plant_pid,
    "net": _plant_net,
    "keyring": _plant_keyring,
    "hostname": _plant_hostname,
    "daemon": _plant_daemon,
}
LOOKS = {
    "sysv_msg": _look_sysv_msg,
    "sysv_shm": _look_sysv_shm,
    "sysv_sem": _look_sysv_sem,
    "posix_mq": _look_posix_mq,
    "mqueue_fs": _look_mqueue_fs,
    **{name: (lambda path=path: _look_file(path)) for name, path in FILES.items()},
    "tmp_times": _look_tmp_times,
    "tmp_xattr": _look_tmp_xattr,
    "tmp_inodes": _look_tmp_inodes,
    "pid": _look_pid,
    "net": _look_net,
    "keyring": _look_keyring,
    "hostname": _look_hostname,
    "abstract_socket": _look_abstract_socket,
    "file_lock": _look_file_lock,
}


def plant(value: int, channels: tuple[str, ...] | None = None) -> dict[str, str]:
    """Leave ``value`` through each channel (all, or ``channels``); what each said: ``ok``, or why not."""
    said = {}
    for name in channels or PLANTS:
        try:
            PLANTS[name](value)
            said[name] = "ok"
        except Exception as exc:  # noqa: BLE001 - a closed channel is an answer
            said[name] = f"{type(exc).__name__}: {exc}"
    return said


def look(channels: tuple[str, ...] | None = None) -> dict[str, int | None]:
    """What each channel holds now (all, or ``channels``)."""
    found = {}
    for name in channels or LOOKS:
        try:
            found[name] = LOOKS[name]()
        except Exception:  # noqa: BLE001 - a closed channel holds nothing
            found[name] = None
    return found


STORES = (
    "sysv_msg",
    "sysv_shm",
    "sysv_sem",
    "posix_mq",
    "mqueue_fs",
    "posix_shm",
    "tmp_file",
    "keyring",
)  # outlive processes


def remove() -> None:
    """Remove what ``plant`` leaves in this process's namespaces and keyrings (a test's clean-up on the host)."""
    if (queue := libc.msgget(KEY, 0)) != -1:
        libc.msgctl(queue, 0, None)  # IPC_RMID
    if (segment := libc.shmget(KEY, 0, 0)) != -1:
        libc.shmctl(segment, 0, None)
    if (semaphore := libc.semget(KEY, 0, 0)) != -1:
        libc.semctl(semaphore, 0, 0)
    libc.mq_unlink(NAME)
    for value in range(1, 256):
        libc.mq_unlink(f"/trajkit-channel-{value}".encode())
    for path in FILES.values():
        if os.path.exists(path):
            os.remove(path)
    for ring in (_SESSION, _USER):
        key = libc.syscall(_KEYCTL[1], 10, ring, b"user", b"trajkit-channel", 0)
        if key > 0:
            libc.syscall(_KEYCTL[1], 9, key, ring)  # KEYCTL_UNLINK
