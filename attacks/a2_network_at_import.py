"""Attack: a `network: false` server's body (run once in the zygote) reaches the network, and its instances
inherit the connection opened there (spawned, the same body is refused the network)."""

import asyncio
import json
import socket
import threading

from common import ToolEnv, cfg, discover

received = []


def listen(srv):
    while True:
        c, _ = srv.accept()
        threading.Thread(target=lambda c=c: received.append(c.recv(100)), daemon=True).start()


async def run(fork):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    threading.Thread(target=listen, args=(srv,), daemon=True).start()
    c = cfg(network=False, fork=fork, env={"EVIL_NET_AT_IMPORT": str(srv.getsockname()[1])})
    rows = await discover({"evil": c})
    async with ToolEnv(rows, config={"evil": c}) as env:
        for i in range(2):
            async with env.episode() as ep:
                body = json.loads((await ep.call("evil", "body", {})).text)
                sent = (
                    (await ep.call("evil", "send_shared", {"text": f"traj{i}"}))
                    if "connected" in body.get("net", "")
                    else None
                )
                print("fork" if fork else "spawn", i, body.get("net"), sent and sent.text)
    await asyncio.sleep(0.5)
    print("listener received", received)
    received.clear()


asyncio.run(run(True))
asyncio.run(run(False))
