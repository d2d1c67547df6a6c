"""A server whose body (run once, in the zygote) arms a timer whose handler never returns: the zygote is alive
but never answers again."""

import signal
import time

from mcp.server import MCPServer

signal.signal(signal.SIGALRM, lambda *_: time.sleep(10**6))
signal.setitimer(signal.ITIMER_REAL, 4)  # (not inherited by a fork: only the zygote wedges)
server = MCPServer("wedge", version="1.0", log_level="WARNING")


@server.tool()
def ping() -> str:
    """pong"""
    return "pong"


if __name__ == "__main__":
    server.run()
