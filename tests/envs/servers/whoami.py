"""An MCP server that reports how it was started (for the fork server's tests): argv, ``__main__``, sys.path[0]."""

from __future__ import annotations

import json
import os
import sys

from mcp.server import MCPServer

server = MCPServer("whoami", version="1.0", log_level="WARNING")
STARTS = []  # module state: each instance starts with its own, empty
BORN = os.getpid()  # forked, the module's body ran once, in the zygote


@server.tool()
def whoami() -> str:
    """How this process was started, and how often this tool ran in it."""
    STARTS.append(1)
    main = sys.modules["__main__"]
    return json.dumps(
        {
            "argv": sys.argv,
            "main": [main.__name__, os.path.realpath(main.__file__), main.__dict__ is globals()],
            "path0": sys.path[0],
            "calls": len(STARTS),
            "bytecode": sys.dont_write_bytecode,
            "born_here": BORN == os.getpid(),
        }
    )


if __name__ == "__main__":
    server.run()
