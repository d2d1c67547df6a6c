"""Text views for prompts: a request's servers and tools, and a conversation as the judge or user simulator reads it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any


def _type(spec: dict[str, Any]) -> str:
    """A parameter's JSON Schema type in words: ``string``, ``array of integer``, ``string or null``."""
    if isinstance(spec.get("type"), list):
        return " or ".join(spec["type"])
    if spec.get("type") == "array" and isinstance(spec.get("items"), dict):
        return f"array of {_type(spec['items'])}"
    if spec.get("type"):
        return spec["type"]
    options = [o for o in spec.get("anyOf") or spec.get("oneOf") or [] if isinstance(o, dict)]
    return " or ".join(_type(o) for o in options) if options else "any"


def parameter_lines(input_schema: str | None) -> list[str]:
    """One line per parameter of a tool: name, type, required or optional, allowed values, default, description."""
    try:
        schema = json.loads(input_schema or "{}")
        params = schema.get("properties") or {}
        required = set(schema.get("required") or [])
    except (ValueError, AttributeError, TypeError):
        return []
    lines = []
    for name, spec in params.items():
        spec = spec if isinstance(spec, dict) else {}
        parts = [_type(spec), "required" if name in required else "optional"]
        if isinstance(spec.get("enum"), list):
            parts.append("one of " + ", ".join(json.dumps(v, ensure_ascii=False) for v in spec["enum"]))
        if "default" in spec:
            parts.append("default " + json.dumps(spec["default"], ensure_ascii=False))
        text = f"  - `{name}`: " + ", ".join(parts)
        lines.append(text + (f". {spec['description']}" if spec.get("description") else ""))
    return lines


def tool_listing(servers: Iterable[dict[str, Any]], routes: list[Any]) -> str:
    """Servers (``servers`` rows) and their tools (``envs.tools.ToolRoute``), by the names the agent sees:
    each tool's title and description, then its parameters (``parameter_lines``)."""
    parts = []
    for s in servers:
        info = s.get("server_info") or {}
        titles = {t["name"]: t.get("title") for t in s.get("tools") or []}
        lines = [f"### {s['name']}" + (f"\n{info['instructions']}" if info.get("instructions") else "")]
        for r in routes:
            if r.server_id == s["server_id"]:
                title = f" ({titles[r.tool]})" if titles.get(r.tool) else ""
                lines.append(f"- `{r.name}`{title}: {r.description}")
                lines.extend(parameter_lines(r.input_schema))
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def conversation_text(messages: list[dict[str, Any]], max_chars: int = 12_000) -> str:
    """A chat as plain text, one block per message, tool calls and results included.

    When longer than ``max_chars`` the middle is cut (the question and the final
    answer matter most to a reader), with a note saying how much.
    """
    blocks = []
    for m in messages:
        role = m.get("role") or "?"
        if role == "system":
            continue
        text = (m.get("content") or "").strip()
        if role == "tool":
            blocks.append(f"[tool result{' from ' + m['name'] if m.get('name') else ''}]\n{text}")
            continue
        calls = [f"-> call {c.get('name')}({c.get('arguments') or ''})" for c in m.get("tool_calls") or []]
        blocks.append(f"[{role}]\n" + "\n".join(x for x in (text, *calls) if x))
    out = "\n\n".join(blocks)
    if len(out) <= max_chars:
        return out
    head, tail = out[: max_chars // 2], out[-max_chars // 2 :]
    return f"{head}\n\n[... {len(out) - len(head) - len(tail)} characters cut ...]\n\n{tail}"
