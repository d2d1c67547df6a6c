"""Attack: leave the instance's memory cgroup by path (spawned and forked)."""

import asyncio

from common import ToolEnv, cfg, discover


async def run(fork):
    c = cfg(fork=fork)
    async with ToolEnv(await discover({"evil": c}), config={"evil": c}) as env, env.episode() as ep:
        print("fork" if fork else "spawn", (await ep.call("evil", "cgroup_escape_path", {})).text)


asyncio.run(run(True))
asyncio.run(run(False))
