"""Render tasks and trajectories as readable conversations in the terminal (CLI ``show``)."""

from __future__ import annotations

import json
from typing import Any


def tool_arguments(arguments: str | None) -> str:
    """Tool-call arguments as compact JSON (as written when they are not JSON)."""
    try:
        return json.dumps(json.loads(arguments or "{}"), ensure_ascii=False)
    except (TypeError, ValueError):
        return str(arguments)


def clip(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars``, saying how much was left out."""
    return text if len(text) <= max_chars else text[:max_chars] + f" … [{len(text) - max_chars} more chars]"


def print_row(row: dict[str, Any], table: str) -> None:
    """Print a task, trajectory, sample or server row to the terminal with rich; everything from the row is
    plain text (``Text``), never rich markup: a ``[link=...]`` in a model's output shows as written."""
    from rich.console import Console
    from rich.panel import Panel
    from rich.text import Text

    console = Console()
    meta = {k: v for k, v in row.items() if k not in ("messages", "tools", "token_ids", "loss_mask", "logprobs")}
    lines = Text("\n").join(
        Text.assemble((k, "bold"), ": ", clip(json.dumps(v, ensure_ascii=False, default=str), 300))
        for k, v in meta.items()
        if v not in (None, [], "")
    )
    title = Text(f"{table} {row.get(_key(table), '')}")
    console.print(Panel(lines, title=title, expand=False), highlight=False)
    styles = {"system": "magenta", "user": "green", "assistant": "cyan", "tool": "yellow"}
    for m in row.get("messages") or []:
        role = m.get("role") or "?"
        body = m.get("content") or ""
        for call in m.get("tool_calls") or []:
            body += f"\n→ {call.get('name')}({tool_arguments(call.get('arguments'))})"
        text = Text()
        if m.get("reasoning_content"):
            text.append(clip(m["reasoning_content"], 4000) + "\n", "dim")
        text.append(clip(body.strip(), 4000) or ("" if text else "(empty)"))
        title = Text(role + (f" · {m['name']}" if m.get("name") else ""))
        console.print(Panel(text, title=title, border_style=styles.get(role, "white"), expand=False), highlight=False)


def _key(table: str) -> str:
    from trajkit.schema import table as get

    return get(table).key
