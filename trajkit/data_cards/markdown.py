"""Markdown for the card: data shown as text, tables, conversations and human-readable numbers.

Everything from the data (questions, answers, tool results, names, reasons, configs) reaches the
README only as code: an inline code span (``code``) or a fenced block (``fence``), each with a fence
longer than any run of backticks in the text, so no markup, image, link, autolink or HTML inside it is
live on the Hub's page. Text inside HTML (a ``<summary>``) is HTML-escaped. The card's own markup is a
``Markdown`` string; a table cell that is neither that nor a number is data and becomes code.
"""

from __future__ import annotations

import html
import re
from typing import Any

from trajkit.render import clip, tool_arguments

_NUMBER = re.compile(r"^(?:n/a|-?[\d,]+(?:\.\d+)?(?: ?(?:%|B|KiB|MiB|GiB))?)$")


class Markdown(str):
    """Markdown the card writes itself (never data): a table keeps it as it is."""


def _longest_backticks(text: str) -> int:
    return max((len(run) for run in re.findall(r"`+", text)), default=0)


def code(value: Any) -> Markdown:
    """A value as an inline code span on one line (empty for None or an empty string)."""
    text = "" if value is None else " ".join(str(value).splitlines())
    if not text.strip():
        return Markdown("")
    ticks = "`" * (_longest_backticks(text) + 1)
    return Markdown(f"{ticks} {text} {ticks}" if text[0] == "`" or text[-1] == "`" else f"{ticks}{text}{ticks}")


def fence(text: str, info: str = "text") -> Markdown:
    """A text as a fenced code block whose fence no line of the text can close."""
    ticks = "`" * max(3, _longest_backticks(text) + 1)
    return Markdown(f"{ticks}{info}\n{text}\n{ticks}")


def in_html(value: Any) -> str:
    """A value as text inside an HTML element (``<summary>``): escaped, on one line."""
    return html.escape(" ".join(str(value).splitlines()))


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A GitHub-flavoured Markdown table: numbers and ``Markdown`` as they are, any other cell as code;
    pipes escaped (GitHub reads ``\\|`` as a pipe inside code in a table)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        text = str(value)
    elif isinstance(value, Markdown) or _NUMBER.match(str(value)):
        text = " ".join(str(value).splitlines())
    else:
        text = code(value)
    return text.replace("|", "\\|")


def conversation(messages: list[dict[str, Any]], max_chars: int = 2000) -> str:
    """A conversation: each message's role and tool name as code, its text and tool calls in fenced blocks."""
    out = []
    for m in messages or []:
        head = f"**{code(m.get('role') or '?')}**" + (
            f" ({code(m['name'])})" if m.get("role") == "tool" and m.get("name") else ""
        )
        parts = [head]
        if m.get("reasoning_content"):
            parts.append("reasoning:\n\n" + fence(clip(m["reasoning_content"], max_chars)))
        if m.get("content"):
            parts.append(fence(clip(m["content"], max_chars)))
        for call in m.get("tool_calls") or []:
            parts.append(fence(f"{call.get('name')}({tool_arguments(call.get('arguments'))})"))
        out.append("\n\n".join(parts))
    return "\n\n---\n\n".join(out)


def fmt_num(x: float | None) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float) and not x.is_integer():
        return f"{x:,.1f}"
    return f"{int(x):,}"


def fmt_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"
