"""Attack: hundreds of forked sessions, some cancelled mid-start, some with a crashing server: processes, fds,
cgroups and socket folders left behind?"""

import asyncio
import glob
import os
import random

import psutil
from common import HERE, ToolEnv, cfg, discover


def cgroups():
    return set(glob.glob("/sys/fs/cgroup/**/trajkit-*-env-0", recursive=True))


async def main():
    c = cfg(script=os.path.join(HERE, "rawevil.py"))
    rows = await discover({"raw": c})
    me = psutil.Process()
    before, fds, cg = {p.pid for p in me.children(recursive=True)}, len(os.listdir("/proc/self/fd")), cgroups()
    rng = random.Random(0)
    async with ToolEnv(rows, config={"raw": c}, warm=2) as env:

        async def one(i):
            async with env.episode() as ep:
                await ep.call("raw", "exit" if i % 7 == 0 else "echo", {"i": i}, timeout_s=10)

        outcomes = {}
        for i in range(200):
            task = asyncio.create_task(one(i))
            if i % 5 == 0:
                await asyncio.sleep(rng.random() * 0.05)
                task.cancel()
            try:
                await task
                outcomes["ok"] = outcomes.get("ok", 0) + 1
            except BaseException as e:  # noqa: BLE001
                outcomes[type(e).__name__] = outcomes.get(type(e).__name__, 0) + 1
        print("outcomes", outcomes, "restarts", env.forks["raw"].restarts, "gone", env.forks["raw"].gone)
        print("fds during", len(os.listdir("/proc/self/fd")) - fds)
    await asyncio.sleep(1)
    left = [p for p in me.children(recursive=True) if p.pid not in before]
    print(
        "left: procs",
        len(left),
        "fds",
        len(os.listdir("/proc/self/fd")) - fds,
        "cgroups",
        len(cgroups() - cg),
        "sock dirs",
        glob.glob("/tmp/trajkit-fork-*"),
    )


asyncio.run(main())
