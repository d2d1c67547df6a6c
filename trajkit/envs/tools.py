"""Harvested tools -> the OpenAI tool schemas a model sees, and the route back to each server.

``tool_schemas`` is the one rendering used by rollouts, evaluation and
training: same servers, same list, same order, same names. Servers come in
the order of ``server_ids`` (or of the rows), tools in the order the server
listed them. A tool keeps its MCP name unless that name is not a valid
function name (``[A-Za-z0-9_-]{1,64}``) or two offered servers share it; then
it becomes ``<server>__<tool>`` with invalid characters replaced by ``_``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from trajkit.models.base import ToolSchema

_VALID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_INVALID_CHARS = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True)
class ToolRoute:
    """Where a rendered tool name goes: the server (id and name) and the tool's MCP name."""

    name: str
    server_id: str
    server: str
    tool: str
    schema: ToolSchema
    input_schema: str
    annotations: str | None
    description: str


def select_servers(servers_rows: list[dict], server_ids: list[str] | None = None) -> list[dict]:
    """The rows for ``server_ids`` in that order (ids or names accepted); all rows when None.

    An unknown id raises KeyError naming it.
    """
    if server_ids is None:
        return list(servers_rows)
    by_key = {r["server_id"]: r for r in servers_rows} | {r["name"]: r for r in servers_rows}
    missing = [s for s in server_ids if s not in by_key]
    if missing:
        raise KeyError(f"unknown server(s): {', '.join(missing)}")
    seen, out = set(), []
    for s in server_ids:
        row = by_key[s]
        if row["server_id"] not in seen:
            seen.add(row["server_id"])
            out.append(row)
    return out


def _function_name(server: str, tool: str, clash: bool) -> str:
    if not clash and _VALID.match(tool):
        return tool
    return _INVALID_CHARS.sub("_", f"{server}__{tool}")[:64]


def tool_routes(servers_rows: list[dict], server_ids: list[str] | None = None) -> list[ToolRoute]:
    """Every offered tool with its rendered schema and its route back to the server, in render order."""
    rows = select_servers(servers_rows, server_ids)
    counts: dict[str, int] = {}
    for row in rows:
        for tool in row.get("tools") or []:
            counts[tool["name"]] = counts.get(tool["name"], 0) + 1
    routes: list[ToolRoute] = []
    for row in rows:
        for tool in row.get("tools") or []:
            name = _function_name(row["name"], tool["name"], counts[tool["name"]] > 1)
            parameters = json.loads(tool["input_schema"]) if tool.get("input_schema") else {"type": "object"}
            description = tool.get("description") or ""
            schema = {
                "type": "function",
                "function": {"name": name, "description": description, "parameters": parameters},
            }
            routes.append(
                ToolRoute(
                    name=name,
                    server_id=row["server_id"],
                    server=row["name"],
                    tool=tool["name"],
                    schema=schema,
                    input_schema=tool.get("input_schema") or "{}",
                    annotations=tool.get("annotations"),
                    description=description,
                )
            )
    return routes


def tool_schemas(servers_rows: list[dict], server_ids: list[str] | None = None) -> list[ToolSchema]:
    """Harvested ``servers`` rows -> OpenAI tool schemas ``{"type": "function", "function": {...}}``.

    ``server_ids`` (ids or names) picks and orders the servers; None offers all rows.
    The same list, in the same order, serves rollouts, evaluation and training.
    """
    return [r.schema for r in tool_routes(servers_rows, server_ids)]


def offered_tools_column(routes: list[ToolRoute]) -> list[dict[str, Any]]:
    """The ``tools`` column of a trajectory: what was offered, by rendered name, with its server."""
    return [
        {
            "server": r.server,
            "name": r.name,
            "description": r.description,
            "input_schema": r.input_schema,
            "annotations": r.annotations,
        }
        for r in routes
    ]
