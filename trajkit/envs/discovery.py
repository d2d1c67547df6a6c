"""Harvest MCP servers: start each one, initialize, list what it declares, and describe it as a ``servers`` row.

What it declares: every tool (title, input and output schemas, annotations), and
where its capabilities say so, its resources, resource templates and prompts
(a list method the server does not serve, JSON-RPC "Method not found", means
none: nothing recorded, no note; any other error of those listings is a note).
The row's ``state`` is the config's ``state:`` or the inferred one
(``config.server_state``); a stateful HTTP server gets a note, since trajkit
cannot contain a server it does not start (its state is shared by every trajectory).

A server that will not start, hangs on ``initialize`` or ``tools/list``, or
lists invalid tools (a missing or duplicate name, an input schema that is not
a JSON Schema object) becomes a row with status ``failed`` and the reason; the
others are harvested (status ``ok``). Every server is shut down afterwards.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from trajkit.envs.config import ServerConfig, server_state, variables
from trajkit.envs.session import Connection, ProtocolError, ServerFault


def base_row(name: str, cfg: ServerConfig) -> dict[str, Any]:
    """The columns of a ``servers`` row that come from the config alone: ``env_names`` are the environment
    variables it reads (a stdio server's env keys, the ``${VAR}`` names of HTTP headers), never values."""
    return {
        "server_id": cfg.server_id(name),
        "name": name,
        "transport": cfg.transport,
        "command": cfg.command,
        "args": list(cfg.args) if cfg.command is not None else None,
        "url": cfg.url,
        "env_names": variables(cfg),
        "volatile": list(cfg.volatile) or None,
    }


STATEFUL_HTTP = "stateful HTTP server: trajkit cannot contain it, so every trajectory shares (and may change) its state"


def _annotations(item: Any) -> str | None:
    a = item.annotations.model_dump(by_alias=True, mode="json", exclude_none=True) if item.annotations else None
    return json.dumps(a, sort_keys=True) if a else None


def tool_record(server: str, tool: Any) -> dict[str, Any]:
    """One harvested tool: name, title, description, input and output schemas and annotations as JSON text."""
    return {
        "server": server,
        "name": tool.name,
        "title": tool.title,
        "description": tool.description or "",
        "input_schema": json.dumps(tool.input_schema, ensure_ascii=False),
        "output_schema": json.dumps(tool.output_schema, ensure_ascii=False) if tool.output_schema else None,
        "annotations": _annotations(tool),
    }


def resource_record(res: Any) -> dict[str, Any]:
    """One harvested resource or resource template (its ``uri`` is then the template)."""
    return {
        "uri": str(getattr(res, "uri", None) or res.uri_template),
        "name": res.name,
        "title": res.title,
        "description": res.description,
        "mime_type": res.mime_type,
        "size": getattr(res, "size", None),
        "annotations": _annotations(res),
    }


def prompt_record(prompt: Any) -> dict[str, Any]:
    """One harvested prompt with its arguments."""
    args = [{"name": a.name, "description": a.description, "required": a.required} for a in prompt.arguments or []]
    return {"name": prompt.name, "title": prompt.title, "description": prompt.description, "arguments": args}


def invalid_tools(tools: list[Any]) -> str | None:
    """Why a tool listing is unusable, or None: names must be present and unique, schemas JSON Schema objects."""
    import jsonschema

    seen: set[str] = set()
    for i, tool in enumerate(tools):
        if not tool.name or not tool.name.strip():
            return f"tool #{i} has no name"
        if tool.name in seen:
            return f"duplicate tool name {tool.name!r}"
        seen.add(tool.name)
        schema = tool.input_schema
        if not isinstance(schema, dict) or schema.get("type") != "object":
            return f"tool {tool.name!r}: input schema is not a JSON Schema of type 'object'"
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as e:
            return f"tool {tool.name!r}: invalid input schema: {e.message[:200]}"
    return None


async def describe_server(
    name: str, cfg: ServerConfig, *, startup_timeout_s: float = 60.0, list_timeout_s: float = 30.0
) -> dict[str, Any]:
    """Start one server, initialize, list everything it declares (all pages), shut it down; a ``servers`` row."""
    from mcp.types.jsonrpc import METHOD_NOT_FOUND

    declared = {"tools": None, "num_tools": None, "resources": None, "resource_templates": None, "prompts": None}
    row = base_row(name, cfg) | {"server_info": None, **declared, "state": server_state(cfg, None), "notes": None}
    # the one start that serves no trajectory warms the package caches every later instance reads
    conn = Connection(name, cfg, startup_timeout_s=startup_timeout_s, warm_caches=True)
    try:
        await conn.open()
        info = conn.init_result
        row["server_info"] = {
            "name": info.server_info.name,
            "version": info.server_info.version,
            "protocol_version": str(info.protocol_version),
            "instructions": info.instructions,
        }
        tools = await conn.list_all("tools", timeout_s=list_timeout_s)
        reason = invalid_tools(tools)
        if reason is not None:
            return row | {"status": "failed", "reason": f"invalid tools: {reason}", "reason_code": "server_crash"}
        records = [tool_record(name, t) for t in tools]
        caps, notes = info.capabilities, []
        for kind, record, declared in (
            ("resources", resource_record, caps.resources),
            ("resource_templates", resource_record, caps.resources),
            ("prompts", prompt_record, caps.prompts),
        ):
            if declared is not None:  # a capability not declared is not asked for
                try:
                    row[kind] = [record(x) for x in await conn.list_all(kind, timeout_s=list_timeout_s)]
                except ProtocolError as e:  # a real error is noted, not a failure
                    if e.code != METHOD_NOT_FOUND:  # an optional list method not served: simply none of them
                        notes.append(f"listing {kind} failed: {e}")
        state = server_state(cfg, records)
        if cfg.transport == "http" and state == "stateful":
            notes.append(STATEFUL_HTTP)
        ok = {"status": "ok", "reason": None}
        return row | {"tools": records, "num_tools": len(records), "state": state, "notes": notes or None} | ok
    except ServerFault as e:
        return row | {"status": "failed", "reason": str(e), "reason_code": e.code}
    except Exception as e:  # noqa: BLE001 - any other fault of this one server (a JSON-RPC error) is its row
        reason = f"{type(e).__name__.lstrip('_')}: {e}"[:2000]
        return row | {"status": "failed", "reason": reason, "reason_code": "server_crash"}
    finally:
        await conn.aclose()


async def discover(
    servers: dict[str, ServerConfig],
    *,
    concurrency: int = 4,
    startup_timeout_s: float = 60.0,
    list_timeout_s: float = 30.0,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Describe every configured server (``concurrency`` at a time); rows in config order.

    ``on_row`` is called as each server is done (for progress).
    """
    sem = asyncio.Semaphore(concurrency)

    async def one(name: str, cfg: ServerConfig) -> dict[str, Any]:
        async with sem:
            row = await describe_server(name, cfg, startup_timeout_s=startup_timeout_s, list_timeout_s=list_timeout_s)
        if on_row is not None:
            on_row(row)
        return row

    return list(await asyncio.gather(*(one(n, c) for n, c in servers.items())))
