"""An MCP server that plants a value through every channel the kernel keeps, and looks for one (``kernel.py``)."""

from __future__ import annotations

import json

import kernel
from mcp.server import MCPServer

from trajkit.envs.servers import serve

server = MCPServer("channels", version="1.0", log_level="WARNING")


@server.tool()
def plant(value: int) -> str:
    """Leave ``value`` (1..255) through every channel; what each said, as JSON."""
    return json.dumps(kernel.plant(value))


@server.tool()
def look() -> str:
    """What each channel holds now, as JSON."""
    return json.dumps(kernel.look())


if __name__ == "__main__":
    serve(server)
