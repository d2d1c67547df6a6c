"""A server that "downloads" itself into ``~/.npm`` on its first start, as ``npx`` does (for containment tests)."""

from __future__ import annotations

import os

from mcp.server import MCPServer

from trajkit.envs.servers import serve

server = MCPServer("pkgcache", version="1.0", log_level="WARNING")
CACHE = os.path.join(os.path.expanduser("~"), ".npm", "pkgcache.tgz")
FOUND = os.path.exists(CACHE)
if not FOUND:
    with open(CACHE, "w") as f:
        f.write("package")


@server.tool()
def start() -> str:
    """How this instance started: from the package cache, or downloading it."""
    return "cached" if FOUND else "downloaded"


@server.tool()
def scribble(name: str) -> str:
    """Write a file into the package cache."""
    try:
        with open(os.path.join(os.path.dirname(CACHE), name), "w") as f:
            f.write("x")
        return "written"
    except OSError as e:
        return f"error: {e.strerror}"


if __name__ == "__main__":
    serve(server)
