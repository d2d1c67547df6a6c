"""Text views for prompts: a request's servers and tools, and a conversation as the judge or user simulator reads it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any


def tool_listing(servers: Iterable[dict[str, Any]], routes: list[Any]) -> str:
    """Servers (``servers`` rows) and their tools (``envs.tools.ToolRoute``), by the names the agent sees."""
    parts = []
    for s in servers:
        info = s.get("server_info") or {}
        lines = [f"### {s['name']}" + (f"\n{info['instructions']}" if info.get("instructions") else "")]
        for r in routes:
            if r.server_id == s["server_id"]:
                try:
                    params = json.loads(r.input_schema or "{}").get("properties") or {}
                except (ValueError, AttributeError):
                    params = {}
                args = ", ".join(
                    f"{k}: {v.get('type', 'any') if isinstance(v, dict) else 'any'}" for k, v in params.items()
                )
                lines.append(f"- `{r.name}({args})`: {r.description}")
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
