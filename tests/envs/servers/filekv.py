"""A stateful MCP server keeping its state in a file named by ``STATE_FILE`` (for containment tests)."""

from __future__ import annotations

import json
import os
import time

from mcp.server import MCPServer

from trajkit.envs.servers import serve

server = MCPServer("filekv", version="1.0", log_level="WARNING")
PATH = os.environ.get("STATE_FILE", "")


def _load() -> dict:
    try:
        with open(PATH) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


@server.tool()
def put(key: str, value: str) -> str:
    """Store a value in the state file."""
    data = _load()
    data[key] = value
    with open(PATH, "w") as f:
        json.dump(data, f)
    return "ok"


@server.tool()
def dump() -> str:
    """The state file's content."""
    return json.dumps(_load(), sort_keys=True)


@server.tool()
def vandalize(path: str) -> str:
    """Delete a file and write a new one beside it; report what happened."""
    os.remove(path)
    with open(path + ".new", "w") as f:
        f.write("x")
    return "done"


@server.tool()
def remount(path: str) -> str:
    """Remount the mount holding ``path`` writable (as root would with its capabilities) and write ``path``."""
    import ctypes

    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    point = max((p for p in points if path.startswith(p.rstrip("/") + "/")), key=len)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(None, point.encode(), None, 0x20 | 0x1000, None):  # MS_REMOUNT | MS_BIND, without MS_RDONLY
        return f"remount refused: {os.strerror(ctypes.get_errno())}"
    with open(path, "w") as f:
        f.write("x")
    return "written"


@server.tool()
def leave_cgroup() -> str:
    """Move this process to its memory cgroup's parent, by path and through any cgroup folder it holds open;
    return its memory cgroup then."""

    def memory() -> str:
        with open("/proc/self/cgroup") as f:
            return next((line.split(":", 2)[2].strip() for line in f if ":memory:" in line), "")

    folders = [f"/proc/self/fd/{fd}" for fd in os.listdir("/proc/self/fd")]
    folders = [f for f in folders if os.path.realpath(f).startswith("/sys/fs/cgroup")]
    for folder in [f"/sys/fs/cgroup/memory{os.path.dirname(memory())}", *folders]:
        try:
            with open(f"{folder}/cgroup.procs", "w") as f:
                f.write(str(os.getpid()))
        except OSError:
            pass
    return memory()


@server.tool()
def daemon() -> str:
    """Fork a daemon (new session) that outlives this call, and return its pid."""
    read, write = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(write, str(os.getpid()).encode())
            time.sleep(300)
        os._exit(0)
    return os.read(read, 32).decode()


@server.tool()
def fill(mb: int) -> str:
    """Write ``mb`` MiB to /tmp; report the error when the disk is full."""
    try:
        with open("/tmp/fill.bin", "wb") as f:
            f.writelines(b"\0" * (1 << 20) for _ in range(mb))
        return "written"
    except OSError as e:
        return f"error: {e.strerror}"


@server.tool()
def hog(mb: int) -> str:
    """Allocate and touch ``mb`` MiB in a child process; report how the child ended."""
    pid = os.fork()
    if pid == 0:
        try:
            block = bytearray(mb << 20)
            block[:: 1 << 12] = b"x" * len(block[:: 1 << 12])
            os._exit(0)
        except MemoryError:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return "allocated" if status == 0 else f"failed: status {status}"


if __name__ == "__main__":
    serve(server)
