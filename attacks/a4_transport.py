"""Attack: a forked server misbehaving on its transport; each call must fail (or answer) in bounded time, the
episode must close, and nothing may be left. Compare with spawned (fork=False) by passing 'spawn'."""

import asyncio
import os
import shutil
import sys
import time

import psutil
from common import HERE, ToolEnv, cfg, discover

FORK = "spawn" not in sys.argv
ONLY = [a for a in sys.argv[1:] if a != "spawn"]


async def one(env, tool, args, timeout=6):
    t0 = time.monotonic()
    rss0 = psutil.Process().memory_info().rss
    disk0 = shutil.disk_usage("/tmp").used
    try:
        async with env.episode() as ep:
            try:
                out = await ep.call("raw", tool, args, timeout_s=timeout)
                seen = f"ok {out.is_error} {out.text[:120]!r}"
            except Exception as e:  # noqa: BLE001
                seen = f"{type(e).__name__}: {str(e)[:300]}"
            t1 = time.monotonic()
    except BaseException as e:  # noqa: BLE001
        seen, t1 = f"EPISODE {type(e).__name__}: {e}", time.monotonic()
    rss = (psutil.Process().memory_info().rss - rss0) >> 20
    disk = (shutil.disk_usage("/tmp").used - disk0) >> 20
    print(
        f"{tool:30} call {t1 - t0:5.1f}s close {time.monotonic() - t1:4.1f}s rss+{rss}MB tmp+{disk}MB  {seen}",
        flush=True,
    )


async def main():
    c = cfg(script=os.path.join(HERE, "rawevil.py"), fork=FORK)
    rows = await discover({"raw": c})
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    fds = len(os.listdir("/proc/self/fd"))
    cases = [
        ("echo", {"x": 1}),
        ("badutf", {}),
        ("exit", {}),
        ("noread", {"text": "y" * (1 << 20)}),
        ("closeout", {}),
        ("noline", {"mb": 200}),
        ("stderrflood", {}),
        ("remote_ref", {}),
        ("bad_schema", {}),
        ("redos", {}),
    ]
    async with ToolEnv(rows, config={"raw": c}) as env:
        for tool, args in cases:
            if not ONLY or tool in ONLY:
                await one(env, tool, args)
        kids = {p.pid for p in me.children(recursive=True)} - before
        print("live children inside env (zygote family):", len(kids))
    await asyncio.sleep(1)
    left = [p for p in me.children(recursive=True) if p.pid not in before]
    print("left after env:", [(p.pid, p.status()) for p in left], "fds", len(os.listdir("/proc/self/fd")) - fds)


asyncio.run(main())
