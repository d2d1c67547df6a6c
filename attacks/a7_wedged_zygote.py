"""Attack: the server's body wedges the zygote (alive, never answering): does a start wait forever?"""

import asyncio
import os
import time

from common import HERE, ToolEnv, cfg, discover


async def main():
    c = cfg(script=os.path.join(HERE, "wedge.py"))
    rows = await discover({"w": c})
    async with ToolEnv(rows, config={"w": c}) as env:
        for i in range(3):
            t0 = time.monotonic()
            try:
                async with asyncio.timeout(90):
                    async with env.episode() as ep:
                        print(i, (await ep.call("w", "ping", {})).text, f"{time.monotonic() - t0:.1f}s", flush=True)
            except TimeoutError:
                print(i, "episode start HUNG (outer 90 s guard)", flush=True)
            await asyncio.sleep(5)


asyncio.run(main())
