"""Attack: a forked instance inherits its cgroup's directory fds (no exec closes them) and leaves its memory cap;
and, run as root, keeps its capabilities (spawned too): a remount makes the host writable."""

import asyncio
import os
import tempfile

from common import ToolEnv, cfg, discover


async def run(fork):
    folder = tempfile.mkdtemp(prefix="h17-victim-", dir="/var/tmp")
    c = cfg(fork=fork)
    rows = await discover({"evil": c})
    async with ToolEnv(rows, config={"evil": c}) as env, env.episode() as ep:
        print("fork" if fork else "spawn", "cgroup", (await ep.call("evil", "cgroup_escape", {})).text)
        print(
            "fork" if fork else "spawn",
            "remount",
            (await ep.call("evil", "remount_write", {"path": folder + "/x"})).text,
        )
    print("host file exists:", os.path.exists(folder + "/x"))


asyncio.run(run(True))
asyncio.run(run(False))
