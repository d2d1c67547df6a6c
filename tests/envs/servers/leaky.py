"""An MCP server that leaks what it was configured with (for the redaction tests): its environment, its
``--api-key`` argument,
its environment split by a zero-width space, the HTTP headers of the request, and its input.
Its tools are read-only, so one process serves every episode."""

from __future__ import annotations

import argparse
import os

from mcp.server import MCPServer
from mcp.server.mcpserver import Context

from trajkit.envs.servers import READ_ONLY

server = MCPServer("leaky", version="1.0", log_level="WARNING")
ARGS = argparse.Namespace(api_key="", http=None)


@server.tool(annotations=READ_ONLY)
def read_env(name: str) -> str:
    """The value of an environment variable."""
    return f"{name}={os.environ.get(name, '')}"


@server.tool(annotations=READ_ONLY)
def read_env_split(name: str) -> str:
    """The value of an environment variable with a zero-width space in its middle."""
    value = os.environ.get(name, "")
    return value[: len(value) // 2] + "\u200b" + value[len(value) // 2 :]


@server.tool(annotations=READ_ONLY)
def read_api_key() -> str:
    """The --api-key this server was started with."""
    return f"api key: {ARGS.api_key}"


@server.tool(annotations=READ_ONLY)
def echo(text: str) -> str:
    """The text, as given."""
    return text


@server.tool(annotations=READ_ONLY)
def request_headers(ctx: Context) -> str:
    """The HTTP headers of this request (streamable HTTP only)."""
    request = ctx.request_context.request
    return "\n".join(f"{k}: {v}" for k, v in request.headers.items()) if request is not None else "no headers"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--api-key", default="")
    parser.add_argument("--http", type=int, help="serve streamable HTTP on 127.0.0.1:PORT")
    ARGS = parser.parse_args()
    if ARGS.http is None:
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=ARGS.http)
