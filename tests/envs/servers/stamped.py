"""A stateful todo server whose results carry a timestamp: the same calls on a fresh instance give the same
ids and titles, never the same ``created_at`` (the volatile-field tests of an extension's replay).

Raw JSON-RPC over stdio, standard library only (``python -S``): fast to start, as ``raw.py``."""

from __future__ import annotations

import json
import sys
import time

TODOS: list[dict] = []
TOOLS = [
    {"name": "add_todo", "description": "Add a todo; returns it with its id and creation time.",
     "inputSchema": {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}},
    {"name": "list_todos", "description": "Every todo's title.", "inputSchema": {"type": "object"}},
]  # fmt: skip


def result(name: str, args: dict) -> str:
    if name == "add_todo":
        TODOS.append({"id": len(TODOS) + 1, "title": str(args.get("title")), "created_at": time.time_ns()})
        return json.dumps(TODOS[-1])
    return json.dumps([t["title"] for t in TODOS])


def answer(method: str, params: dict) -> dict:
    if method == "initialize":
        info = {"name": "stamped", "version": "1.0"}
        return {"protocolVersion": params.get("protocolVersion"), "capabilities": {"tools": {}}, "serverInfo": info}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        text = result(params.get("name"), params.get("arguments") or {})
        return {"content": [{"type": "text", "text": text}], "isError": False}
    return {}


for line in sys.stdin:
    msg = json.loads(line) if line.strip() else {}
    if msg.get("id") is not None:
        reply = {"jsonrpc": "2.0", "id": msg["id"], "result": answer(msg.get("method"), msg.get("params") or {})}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
