"""tool_schemas: the one rendering of harvested tools for rollouts, evaluation and training."""

from __future__ import annotations

import json

import pytest

from trajkit.envs.tools import tool_routes, tool_schemas


def server(name: str, *tools: str, sid: str | None = None) -> dict:
    return {
        "server_id": sid or f"id-{name}",
        "name": name,
        "status": "ok",
        "tools": [
            {
                "server": name,
                "name": t,
                "description": f"{t} of {name}",
                "input_schema": json.dumps({"type": "object", "properties": {"x": {"type": "number"}}}),
                "annotations": None,
            }
            for t in tools
        ],
    }


ROWS = [server("calc", "add", "sqrt"), server("kv", "get", "set"), server("notes", "get", "tag.list")]


def test_openai_shape_and_order():
    schemas = tool_schemas(ROWS, ["id-kv", "id-calc"])
    assert [s["function"]["name"] for s in schemas] == ["get", "set", "add", "sqrt"]
    assert schemas[2] == {
        "type": "function",
        "function": {
            "name": "add",
            "description": "add of calc",
            "parameters": {"type": "object", "properties": {"x": {"type": "number"}}},
        },
    }


def test_all_rows_when_no_ids_and_names_are_accepted():
    assert len(tool_schemas(ROWS)) == 6
    assert tool_schemas(ROWS, ["calc"]) == tool_schemas(ROWS, ["id-calc"])


def test_clashing_and_invalid_names_are_qualified_and_routed_back():
    routes = tool_routes(ROWS, ["kv", "notes"])
    assert [r.name for r in routes] == ["kv__get", "set", "notes__get", "notes__tag_list"]
    assert [(r.server, r.tool) for r in routes] == [
        ("kv", "get"),
        ("kv", "set"),
        ("notes", "get"),
        ("notes", "tag.list"),
    ]


def test_rendering_is_deterministic_and_json_stable():
    assert json.dumps(tool_schemas(ROWS)) == json.dumps(tool_schemas([dict(r) for r in ROWS]))


def test_unknown_server_is_named():
    with pytest.raises(KeyError, match="nope"):
        tool_schemas(ROWS, ["nope"])
