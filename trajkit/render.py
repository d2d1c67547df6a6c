"""Render tasks and trajectories as readable conversations (CLI ``show``, data cards)."""

from __future__ import annotations

import json
from typing import Any


def _args(arguments: str | None) -> str:
    try:
        return json.dumps(json.loads(arguments or "{}"), ensure_ascii=False)
    except (TypeError, ValueError):
        return str(arguments)


def conversation_markdown(messages: list[dict[str, Any]], max_chars: int = 2000) -> str:
    """A conversation as Markdown: one block per message, tool calls as code."""
    out = []
    for m in messages or []:
        role = m.get("role") or "?"
        head = f"**{role}**" + (f" ({m['name']})" if role == "tool" and m.get("name") else "")
        body = _clip(m.get("content") or "", max_chars)
        parts = [head]
        if m.get("reasoning_content"):
            parts.append("> " + _clip(m["reasoning_content"], max_chars).replace("\n", "\n> "))
        if body:
            parts.append(body)
        for call in m.get("tool_calls") or []:
            parts.append(f"`{call.get('name')}({_args(call.get('arguments'))})`")
        out.append("\n\n".join(parts))
    return "\n\n---\n\n".join(out)


def _clip(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[:max_chars] + f" … [{len(text) - max_chars} more chars]"


def print_row(row: dict[str, Any], table: str) -> None:
    """Print a task, trajectory, sample or server row to the terminal with rich."""
    from rich.console import Console
    from rich.panel import Panel

    console = Console()
    meta = {k: v for k, v in row.items() if k not in ("messages", "tools", "token_ids", "loss_mask", "logprobs")}
    lines = "\n".join(
        f"[bold]{k}[/]: {_clip(json.dumps(v, ensure_ascii=False, default=str), 300)}"
        for k, v in meta.items()
        if v not in (None, [], "")
    )
    console.print(Panel(lines, title=f"{table} {row.get(_key(table), '')}", expand=False), highlight=False)
    styles = {"system": "magenta", "user": "green", "assistant": "cyan", "tool": "yellow"}
    for m in row.get("messages") or []:
        role = m.get("role") or "?"
        text = m.get("content") or ""
        if m.get("reasoning_content"):
            text = f"[dim]{m['reasoning_content']}[/dim]\n{text}"
        for call in m.get("tool_calls") or []:
            text += f"\n→ {call.get('name')}({_args(call.get('arguments'))})"
        title = role + (f" · {m['name']}" if m.get("name") else "")
        console.print(
            Panel(
                _clip(text.strip(), 4000) or "(empty)",
                title=title,
                border_style=styles.get(role, "white"),
                expand=False,
            ),
            highlight=False,
        )


def _key(table: str) -> str:
    from trajkit.schema import table as get

    return get(table).key
