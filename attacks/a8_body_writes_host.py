# ruff: noqa: ASYNC230, SIM115
"""Attack: the server's import-time code runs in the zygote, which keeps its capabilities (it needs them to
contain each instance): it remounts the host writable and writes a host file. Spawned, the same body runs
after the capabilities are dropped."""

import asyncio
import os
import tempfile

from common import HERE, ToolEnv, cfg, discover


async def main(fork):
    folder = tempfile.mkdtemp(prefix="h17-body-", dir=os.path.dirname(HERE))  # not overlaid: the repo
    victim = os.path.join(folder, "victim.txt")
    c = cfg(script=os.path.join(HERE, "bodywrite.py"), env={"VICTIM": victim}, fork=fork)
    rows = await discover({"b": c})
    async with ToolEnv(rows, config={"b": c}) as env, env.episode() as ep:
        print("fork" if fork else "spawn", (await ep.call("b", "seen", {})).text)
    print("host file:", open(victim).read() if os.path.exists(victim) else None)
    if os.path.exists(victim):
        os.remove(victim)
    os.rmdir(folder)


asyncio.run(main(True))
asyncio.run(main(False))
