"""Attack: instances still alive when the env closes (the warm pool's, a trajectory's) are SIGKILLed through their
zygote's death: does each one's memory cgroup (trajkit-PID-env-0) stay behind?"""

import asyncio
import glob
import sys

from common import ToolEnv, cfg, discover


def cgroups():
    return set(glob.glob("/sys/fs/cgroup/**/trajkit-*-env-0", recursive=True))


async def main(fork):
    c = cfg(fork=fork)
    rows = await discover({"evil": c})
    before = cgroups()
    async with ToolEnv(rows, config={"evil": c}, warm=4) as env:
        async with env.episode() as ep:
            await ep.call("evil", "body", {})
        await asyncio.sleep(3)  # the warm pool fills
        print("during:", len(cgroups() - before))
    await asyncio.sleep(2)
    print("fork" if fork else "spawn", "left after env:", sorted(cgroups() - before))


asyncio.run(main("spawn" not in sys.argv))
