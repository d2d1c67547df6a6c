"""Rule filters on trajectories: cheap checks that drop rollouts no judge needs to see.

Each rule takes a ``trajectories`` row and returns a reason (a short code) or
None. ``check`` runs the chosen rules and returns every reason that applies,
so a row rejected for two things counts under both.
"""

from __future__ import annotations

import json
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

Row = dict[str, Any]
Rule = Callable[[Row], "str | None"]

# A text this long or longer that zlib compresses more than this ratio repeats itself
# (English prose compresses about 1.3-2.3x; a loop of one sentence 10x and more).
MIN_REPEAT_CHARS = 200
MAX_COMPRESSION_RATIO = 4.0
MAX_SAME_CALLS = 3


def _tool_calls(row: Row) -> list[dict[str, Any]]:
    return [c for m in row.get("messages") or [] if m.get("role") == "assistant" for c in m.get("tool_calls") or []]


def is_tool_error(message: dict[str, Any]) -> bool:
    """Whether a ``tool`` message reports an error: the agent loop starts every error result with "Error"."""
    return (message.get("content") or "").lstrip().lower().startswith("error")


def no_tool_call(row: Row) -> str | None:
    """The agent answered without calling any tool."""
    n = row.get("num_tool_calls")
    return "no_tool_call" if (n if n is not None else len(_tool_calls(row))) == 0 else None


def all_tool_errors(row: Row) -> str | None:
    """Every tool result in the conversation is an error."""
    results = [m for m in row.get("messages") or [] if m.get("role") == "tool"]
    return "all_tool_errors" if results and all(is_tool_error(m) for m in results) else None


def empty_final_answer(row: Row) -> str | None:
    """The conversation ends without a non-empty answer from the assistant."""
    answer = row.get("final_answer")
    return "empty_final_answer" if answer is None or not str(answer).strip() else None


def degenerate_repetition(row: Row) -> str | None:
    """The assistant loops: a long text that compresses far too well, or one call made again and again."""
    for m in row.get("messages") or []:
        if m.get("role") != "assistant":
            continue
        text = (m.get("content") or "").encode()
        if len(text) >= MIN_REPEAT_CHARS and len(text) / len(zlib.compress(text, 9)) > MAX_COMPRESSION_RATIO:
            return "degenerate_repetition"
    calls = Counter((c.get("name"), _canonical(c.get("arguments"))) for c in _tool_calls(row))
    if calls and max(calls.values()) >= MAX_SAME_CALLS:
        return "degenerate_repetition"
    return None


def uncalled_targets(row: Row, targets: Iterable[str]) -> list[str]:
    """The target tools that no call of the conversation used with a result that is not an error."""
    results = {m.get("tool_call_id"): m for m in row.get("messages") or [] if m.get("role") == "tool"}
    used = {c.get("name") for c in _tool_calls(row) if c.get("id") in results and not is_tool_error(results[c["id"]])}
    return [t for t in dict.fromkeys(targets) if t not in used]


RULES: dict[str, Rule] = {
    "no_tool_call": no_tool_call,
    "all_tool_errors": all_tool_errors,
    "empty_final_answer": empty_final_answer,
    "degenerate_repetition": degenerate_repetition,
}


def check(row: Row, rules: Iterable[str] = tuple(RULES)) -> list[str]:
    """The reasons (rule names) for which ``row`` fails the given rules; empty when it passes."""
    return [reason for name in rules if (reason := RULES[name](row))]


def _canonical(arguments: Any) -> str:
    try:
        return (
            json.dumps(json.loads(arguments), sort_keys=True)
            if isinstance(arguments, str)
            else json.dumps(arguments, sort_keys=True)
        )
    except (ValueError, TypeError):
        return str(arguments)
