"""The project's example MCP servers: deterministic, small, run with ``python -m``.

* ``calculator`` — arithmetic and a safe expression evaluator (read-only, so pooled).
* ``kv`` — a key-value store whose state lives in the process (stateful: one
  fresh process per trajectory; an outcome check reads its end state).
* ``units`` — unit conversion for length, mass, time, data and temperature (read-only).

Each serves stdio by default; ``--http PORT`` serves streamable HTTP on
127.0.0.1 instead (used by the tests of the HTTP transport).
"""

from __future__ import annotations

import argparse
import math

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)


def number(x: float) -> int | float:
    """A result rounded to 12 decimals, as an int when integral (``5`` rather than ``5.0``)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ToolError(f"not a real number: {x!r}")
    if not math.isfinite(x):
        raise ToolError("result is not finite")
    x = round(float(x), 12)
    return int(x) if x.is_integer() and abs(x) < 2**53 else x


def serve(server: MCPServer) -> None:
    """Run a server on stdio, or on streamable HTTP with ``--http PORT``."""
    parser = argparse.ArgumentParser(prog=f"python -m trajkit.envs.servers.{server.name}")
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT")
    args = parser.parse_args()
    if args.http is None:
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
