"""Does a forked server that uses multiprocessing (fork, spawn, forkserver) or threads behave as spawned?"""

import asyncio
import os

from common import HERE, ToolEnv, cfg, discover


async def run(fork):
    c = cfg(script=os.path.join(HERE, "mp.py"), fork=fork)
    async with ToolEnv(await discover({"mp": c}), config={"mp": c}) as env, env.episode() as ep:
        for method in ("fork", "spawn", "forkserver"):
            try:
                out = (await ep.call("mp", "pool", {"method": method}, timeout_s=30)).text
            except Exception as e:  # noqa: BLE001
                out = f"{type(e).__name__}: {str(e)[:300]}"
            print("fork" if fork else "spawn", method, out, flush=True)
        print("fork" if fork else "spawn", "thread", (await ep.call("mp", "thread", {})).text)


asyncio.run(run(True))
asyncio.run(run(False))
