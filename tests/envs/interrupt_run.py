"""Run by test_leaks: trajectories hanging in tool calls, to be interrupted (SIGINT, Ctrl-C) or killed.
Arguments: the raw server's path, then flags for its processes (``--linger``)."""

from __future__ import annotations

import asyncio
import faulthandler
import signal
import sys

from trajkit.envs.config import ServerConfig
from trajkit.envs.discovery import discover
from trajkit.envs.env import ToolEnv

RAW, FLAGS = sys.argv[1], sys.argv[2:]
faulthandler.register(signal.SIGUSR1, all_threads=True)  # a test that finds it hung asks where


async def main() -> None:
    config = {
        "fresh": ServerConfig(command=sys.executable, args=[RAW, "--no-readonly", *FLAGS]),  # forked, contained
        "shared": ServerConfig(command=sys.executable, args=["-S", RAW, *FLAGS]),
    }
    rows = await discover(config)
    async with ToolEnv(rows, config=config, pool_size=1) as env:

        async def one() -> None:
            async with env.episode() as ep:
                pids = [(await ep.call(name, "pid", {})).text for name in ("fresh", "shared")]
                print("pids", *pids, flush=True)
                await ep.call("fresh", "hang", {}, timeout_s=600)

        await asyncio.gather(*(one() for _ in range(4)))


asyncio.run(main())
