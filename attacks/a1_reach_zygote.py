"""Attack: an instance finds the zygote's socket (through its /tmp overlay) and asks it for an instance."""

import asyncio

from common import ToolEnv, cfg, discover


async def main():
    c = cfg()
    rows = await discover({"evil": c})
    async with ToolEnv(rows, config={"evil": c}) as env:
        async with env.episode() as ep:
            print("fds", (await ep.call("evil", "fds", {})).text)
            print("reach", (await ep.call("evil", "reach_zygote", {"network": True})).text)
            print("ps", (await ep.call("evil", "ps", {})).text)
        print("forked:", env.forks["evil"].proc is not None, env.forks["evil"]._dir)


asyncio.run(main())
