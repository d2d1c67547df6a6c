"""Key-value store MCP server: state lives in the process, so each trajectory gets a fresh one.

An outcome check reads the end state with ``get`` or ``list_keys`` on the same
session, after the agent finished.
"""

from __future__ import annotations

import json
from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from trajkit.envs.servers import READ_ONLY, serve

server = MCPServer(
    "kv", version="1.0", instructions="A key-value store. Keys and values are strings.", log_level="WARNING"
)

Key = Annotated[str, Field(description="The key.", min_length=1, max_length=200)]
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
DELETE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
MAX_KEYS = 10_000

store: dict[str, str] = {}


@server.tool(name="set", annotations=WRITE)
def set_value(key: Key, value: Annotated[str, Field(description="The value.", max_length=10_000)]) -> str:
    """Store a value under a key (replacing any previous value)."""
    if key not in store and len(store) >= MAX_KEYS:
        raise ToolError(f"store is full ({MAX_KEYS} keys)")
    store[key] = value
    return f"ok: {key} = {value}"


@server.tool(name="get", annotations=READ_ONLY)
def get_value(key: Key) -> str:
    """The value stored under a key; fails if the key is absent."""
    if key not in store:
        raise ToolError(f"no such key: {key}")
    return store[key]


@server.tool(name="delete", annotations=DELETE)
def delete_key(key: Key) -> str:
    """Remove a key; fails if the key is absent."""
    if key not in store:
        raise ToolError(f"no such key: {key}")
    del store[key]
    return f"deleted: {key}"


@server.tool(annotations=READ_ONLY)
def list_keys(prefix: Annotated[str, Field(description="Only keys starting with this.")] = "") -> str:
    """All keys (optionally with a prefix), sorted, as a JSON list."""
    return json.dumps(sorted(k for k in store if k.startswith(prefix)))


@server.tool(annotations=READ_ONLY)
def dump() -> str:
    """The whole store as a JSON object with sorted keys (for outcome checks)."""
    return json.dumps(store, sort_keys=True)


if __name__ == "__main__":
    serve(server)
