"""A server whose tool uses multiprocessing (fork and spawn start methods) and a thread."""

import multiprocessing
import threading

from mcp.server import MCPServer

server = MCPServer("mp", version="1.0", log_level="WARNING")


def square(x: int) -> int:
    return x * x


@server.tool()
def pool(method: str) -> str:
    """Squares through a pool of the given start method."""
    with multiprocessing.get_context(method).Pool(2) as p:
        return str(p.map(square, range(5)))


@server.tool()
def thread() -> str:
    """A thread's result."""
    out = []
    t = threading.Thread(target=lambda: out.append(square(7)))
    t.start()
    t.join()
    return str(out)


if __name__ == "__main__":
    server.run()
