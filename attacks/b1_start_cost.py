"""Side by side: CPU-seconds per forked start (client + zygote family) over N sequential episodes of the raw
server, to compare the zygote with and without the user-namespace lock (toggle by hand)."""

import asyncio
import os
import sys
import time

import psutil
from common import HERE, ToolEnv, cfg, discover

N = int(sys.argv[1]) if len(sys.argv) > 1 else 40


async def main():
    c = cfg(script=os.path.join(HERE, "rawevil.py"))
    rows = await discover({"raw": c})
    async with ToolEnv(rows, config={"raw": c}) as env:
        async with env.episode() as ep:
            await ep.call("raw", "echo", {})
        z = psutil.Process(env.forks["raw"].proc.pid).children()[0]

        def zcpu():
            t = z.cpu_times()
            return t.user + t.system + t.children_user + t.children_system

        t0, cpu0, z0 = time.monotonic(), sum(os.times()[:4]), zcpu()
        for i in range(N):
            async with env.episode() as ep:
                await ep.call("raw", "echo", {"i": i})
        # os.times children fields count reaped descendants only; instances are the zygote's: read its family
        wall = time.monotonic() - t0
        print(
            f"{N} episodes: wall {wall / N * 1000:.1f} ms each, client cpu {(sum(os.times()[:4]) - cpu0) / N * 1000:.1f} ms,"
            f" zygote+reaped children {(zcpu() - z0) / N * 1000:.1f} ms"
        )


asyncio.run(main())
