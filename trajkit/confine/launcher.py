"""Run one stdio MCP server contained for one trajectory.

``python -B -I -S FOLDER launcher SPEC_JSON -- COMMAND ARGS...`` (``start.command``; standard library only, and no
site-packages, so that a start imports no packages; ``trajkit.envs.contain.wrap`` gives this command line)
enters new mount, pid and IPC namespaces (and a network namespace when the spec says
``network: false``), makes every host mount read-only, and puts a copy-on-write overlay
over each path the server may write (``spec["writable"]``: paths named in its
args/env/cwd, its home, /tmp). The overlays' upper layers sit on a size-capped tmpfs
mounted over the namespace's own /dev/shm (nothing is made on the host), so writes
vanish with the trajectory and no other trajectory or the host sees them; with
``spec["keep"]`` (a folder under the run directory) they land there instead. The server
is pid 1's only child: when it exits or the launcher is killed, the kernel kills every
process left in the namespace (daemons included). The launcher dies with its client
(parent-death signal: SIGTERM, on which it kills the namespace and removes its cgroup), so a
client killed outright leaves no server (nor cgroup) behind, not even one that ignores its
closed stdin. Memory is capped per instance
(``spec["memory_mb"]``): by a memory cgroup holding the whole namespace where one can be made,
else by ``RLIMIT_AS`` on the server (a cap on address space, not on use: runtimes that reserve
large virtual ranges, such as V8 or the JVM, may then fail to start below a few GiB). With
``spec["readonly"]`` (a stateless server shared by trajectories) the only overlays are over the
package caches (``~/.cache``, ``~/.npm``, ``~/.local``: uvx and npx write there to start) and every other write
but to its private /dev/shm fails, so a server wrongly declared stateless cannot carry state
between trajectories through the user's files. Run as a non-root user, the namespaces are made
inside a user namespace of the launcher's own (``isolation.enter_namespaces``), the overlays
keep their bookkeeping in ``user.`` extended attributes, and each writable folder gets an overlay of
its own. Root or not, the server runs with every capability dropped, a seccomp filter refusing the keyring
calls (keyrings are not namespaced), and ``/sys`` and ``/proc/sys`` read-only (docs/sandbox.md).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import sys
from collections.abc import Callable

from . import isolation as iso
from . import zygote

LAYERS = "/dev/shm/.trajkit-layers"  # in the instance's own /dev/shm (a tmpfs of DISK_MB)
MS_RDONLY_REMOUNT = iso.MS_REMOUNT | iso.MS_BIND | iso.MS_RDONLY
SKIP_RO = ("/proc", "/sys", "/dev")


@functools.cache
def missing() -> str | None:
    """Why this machine cannot contain a server (None when it can): tried once in a child."""
    pid = os.fork()
    if pid == 0:
        try:
            userns = iso.enter_namespaces(iso.CLONE_NEWNS | iso.CLONE_NEWPID | iso.CLONE_NEWIPC)
        except OSError:
            os._exit(1)
        try:
            if userns:  # overlayfs in a user namespace needs Linux >= 5.11
                iso.mount(None, "/", None, iso.MS_REC | iso.MS_PRIVATE)
                _mount_layer_tmpfs(1)
                os.mkdir(f"{LAYERS}/probe")
                _overlay(f"{LAYERS}/probe", f"{LAYERS}/0", userns)
        except OSError:
            os._exit(2)
        try:
            iso.install_seccomp(programs=False)
        except OSError:
            os._exit(3)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if status == 0 and os.geteuid() != 0 and iso.own_proc_refused():
        return iso.OWN_PROC_REFUSED
    return {
        0: None,
        1: "mount, pid and IPC namespaces cannot be created here",
        2: "overlayfs cannot be mounted in a user namespace here (Linux >= 5.11 can)",
        3: "no seccomp filter keeps servers from the kernel's keyrings here",
    }.get(os.waitstatus_to_exitcode(status), "the namespace probe failed")


def _mount_layer_tmpfs(size_mb: int) -> None:
    """A tmpfs over /dev/shm holding the layers' folder: nothing is made on the host (nothing is left there
    if the launcher is killed), and no overlay covers it."""
    iso.mount("tmpfs", "/dev/shm", "tmpfs", iso.MS_NOSUID | iso.MS_NODEV, f"size={size_mb}m,mode=1777")
    os.mkdir(LAYERS, 0o700)


def _overlay(path: str, layer: str, userns: bool) -> None:
    """A copy-on-write overlay over ``path`` whose writes land in ``layer``; in a user namespace its own
    bookkeeping goes in ``user.`` extended attributes (``trusted.`` ones need root)."""
    upper, work = f"{layer}/upper", f"{layer}/work"
    os.makedirs(upper, exist_ok=True)
    os.makedirs(work, exist_ok=True)
    options = f"lowerdir={path},upperdir={upper},workdir={work}" + (",userxattr" if userns else "")
    iso.mount("overlay", path, "overlay", 0, options)


def _contain(spec: dict, userns: bool) -> None:
    """In the new mount namespace: host read-only, an overlay over each writable path."""
    iso.mount(None, "/", None, iso.MS_REC | iso.MS_PRIVATE)
    through = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in spec.get("through", [])}  # the host's
    _mount_layer_tmpfs(spec["disk_mb"])
    layers = LAYERS
    if spec["keep"]:  # the layers land in the kept folder instead
        iso.mount(spec["keep"], layers, None, iso.MS_BIND)
    for point, flags in iso.mounts():
        if point.startswith(SKIP_RO) or point == layers or point.startswith(layers + "/"):
            continue
        try:
            iso.mount(None, point, None, MS_RDONLY_REMOUNT | flags)
        except OSError as e:  # a mount hidden under another one cannot be reached: its cover is read-only
            if e.errno not in (2, 13, 22):
                raise
    for i, path in enumerate(spec["writable"]):
        _overlay(path, f"{layers}/{i}", userns)
    if os.path.isdir("/dev/mqueue"):  # the host's POSIX message queues there: this IPC namespace's instead
        iso.mount("mqueue", "/dev/mqueue", "mqueue", iso.MS_NOSUID | iso.MS_NODEV | iso.MS_NOEXEC)
    for path, fd in through.items():  # the host's own folder over any layer, then writable again
        iso.mount(f"/proc/self/fd/{fd}", path, None, iso.MS_BIND)
        flags = dict(iso.mounts()).get(path, 0)  # nosuid, nodev, ... kept (a user namespace may not drop them)
        iso.mount(None, path, None, iso.MS_REMOUNT | iso.MS_BIND | flags)
        os.close(fd)


def main(argv: list[str]) -> int:
    # a client killed outright (SIGKILL) takes us with it: _serve's handler kills the namespace, the cgroup goes
    iso.prctl(iso.PR_SET_PDEATHSIG, signal.SIGTERM)
    return run(json.loads(argv[0]), argv[argv.index("--") + 1 :])


def _cgroup(memory_mb: int) -> iso.Cgroup | None:
    """A memory cgroup of ``memory_mb`` that this launcher joins (its children are born in it), or None."""
    try:
        host_pid = os.readlink("/proc/self")  # (a fork server's child has a small pid of the zygote's namespace)
        cgroup = iso.Cgroup(f"trajkit-{host_pid}-env-0")
    except OSError:
        return None
    try:
        cgroup.limit_memory(memory_mb << 20)
        cgroup.join()
    except OSError:
        cgroup.remove()
        return None
    return cgroup


def sweep() -> None:
    """Remove the cgroups launchers killed outright left behind (a fork server's instances, killed with it, can
    remove nothing): making one removes every one whose pid is gone (``iso.Cgroup``); then it goes too."""
    with contextlib.suppress(OSError):
        iso.Cgroup(f"trajkit-{os.getpid()}-env-0").remove()


def _leave(cgroup: iso.Cgroup) -> None:
    """Move the launcher back to its parent cgroups (the namespace's processes stay capped)."""
    for d in cgroup.dirs:
        with contextlib.suppress(OSError), open(os.path.join(os.path.dirname(d), "cgroup.procs"), "w") as f:
            f.write("0")


def run(spec: dict, command: list[str] | Callable[[], object]) -> int:
    """Run ``command`` (an argv to exec, or a function of this process, e.g. in a fork server's child)
    contained as ``spec`` says, and return its exit status."""
    flags = (
        iso.CLONE_NEWNS | iso.CLONE_NEWPID | iso.CLONE_NEWIPC | (0 if spec.get("network", True) else iso.CLONE_NEWNET)
    )
    cgroup = _cgroup(spec["memory_mb"]) if spec.get("memory_mb") else None
    try:
        userns = iso.enter_namespaces(flags)  # not root: inside a user namespace of the caller's own
        _contain(spec, userns or spec.get("in_userns", False))  # (a fork server's child: inside the zygote's)
        return _serve(spec, command, cgroup)
    finally:
        if cgroup is not None:
            cgroup.remove()


def _kernel_read_only() -> None:
    """In a mount namespace of pid 1's own (the launcher still removes the cgroup through its own ``/sys``):
    ``/sys`` and ``/proc/sys`` read-only, or a server, even without capabilities, could write the root-owned
    files there as root (leave its memory cgroup by path, say)."""
    iso.unshare(iso.CLONE_NEWNS)
    iso.mount("/proc/sys", "/proc/sys", None, iso.MS_BIND | iso.MS_REC)
    for point, flags in iso.mounts():
        if point in ("/sys", "/proc/sys") or point.startswith(("/sys/", "/proc/sys/")):
            try:
                iso.mount(None, point, None, MS_RDONLY_REMOUNT | flags)
            except OSError as e:  # as in _contain: a mount hidden under another one cannot be reached
                if e.errno not in (2, 13, 22):
                    raise


def _serve(spec: dict, command: list[str] | Callable[[], object], cgroup: iso.Cgroup | None) -> int:
    pid = zygote.fork_init()  # the child is pid 1 of the new pid namespace: it, and so the namespace, dies with us
    if pid == 0:
        os.setsid()
        iso.mount(None, "/proc", None, iso.MS_REC | iso.MS_PRIVATE)
        iso.mount("proc", "/proc", "proc", iso.MS_NOSUID | iso.MS_NODEV | iso.MS_NOEXEC)
        _kernel_read_only()
        if spec.get("memory_mb") and cgroup is None:
            import resource

            cap = spec["memory_mb"] << 20
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        server = os.fork()
        if server == 0:
            for fd in [*cgroup.fds, *(fd for fd, _ in cgroup.parents)] if cgroup is not None else []:
                os.close(fd)  # (no exec closes them in a fork server's instance): it could leave its cgroup
            iso.drop_capabilities()  # the namespaces' (or root's) capabilities would let it remount the host writable
            iso.install_seccomp(programs=False)  # no keyrings: they are not namespaced
            if callable(command):
                command()
                os._exit(0)
            try:
                os.execvp(command[0], command)
            except OSError as e:
                print(f"cannot start server: {e}", file=sys.stderr)
                os._exit(127)
        while True:  # pid 1: reap everything; when the server is gone, leaving kills the rest
            done, status = os.wait()
            if done == server:
                os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    if cgroup is not None:
        _leave(cgroup)
    return zygote.wait_init(pid) & 0xFF


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
