"""Control: connect to the zygote's socket from the host (the client's own view) while the env lives."""

import asyncio
import os
import socket

from common import ToolEnv, cfg, discover


async def main():
    c = cfg()
    rows = await discover({"evil": c})
    async with ToolEnv(rows, config={"evil": c}) as env, env.episode() as ep:
        await ep.call("evil", "body", {})
        path = os.path.join(env.forks["evil"]._dir, "sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            s.connect(path)
            print("host connect ok")
        except OSError as e:
            print("host connect", e)
        print("reach", (await ep.call("evil", "reach_zygote", {"network": True})).text)
        os.system(f"ls -la {os.path.dirname(path)}; ss -xl | grep trajkit-fork")  # noqa: ASYNC221


asyncio.run(main())
