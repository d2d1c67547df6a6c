"""Attack: the client is SIGKILLed mid-trajectory (a Ray worker killed): what stays behind? (processes, the
zygote's socket folder, cgroups). Run: python a6_killed_client.py [spawn]"""

import glob
import os
import signal
import subprocess
import sys
import time

import psutil

CHILD = r"""
import asyncio, sys
sys.path.insert(0, sys.argv[1])
from common import cfg, discover, ToolEnv
async def main():
    c = cfg(fork=sys.argv[2] == "fork")
    rows = await discover({"evil": c})
    async with ToolEnv(rows, config={"evil": c}, warm=4) as env:
        async with env.episode() as ep:
            await ep.call("evil", "body", {})
            await asyncio.sleep(3)
            print("ready", flush=True)
            await asyncio.sleep(600)
asyncio.run(main())
"""


def state():
    return (
        set(glob.glob("/sys/fs/cgroup/**/trajkit-*-env-0", recursive=True)),
        set(glob.glob("/tmp/trajkit-fork-*")),
        {p.pid for p in psutil.process_iter()},
    )


mode = "spawn" if "spawn" in sys.argv else "fork"
cg0, dirs0, procs0 = state()
proc = subprocess.Popen(
    [sys.executable, "-c", CHILD, os.path.dirname(os.path.abspath(__file__)), mode], stdout=subprocess.PIPE, text=True
)
assert proc.stdout.readline().strip() == "ready"
family = psutil.Process(proc.pid).children(recursive=True)
print(mode, "client's family:", len(family))
proc.send_signal(signal.SIGKILL)
proc.wait()
time.sleep(3)
cg, dirs, procs = state()
alive = [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
print("processes left:", [(p.pid, p.cmdline()[:3]) for p in alive])
print("cgroups left:", sorted(cg - cg0))
print("socket folders left:", sorted(dirs - dirs0))
