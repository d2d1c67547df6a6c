"""A side-by-side diff of two trajectories of one task: the conversations aligned message by message
(``difflib`` over each message's role, tool, text and calls), so the turns the two share sit side by
side and the ones that differ stand out; where they differ, messages of the same role and tool are
paired (``difflib`` again, over roles), the rest face a gap."""

from __future__ import annotations

import difflib
import json
from typing import Any


def diff_rows(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two conversations' messages aligned: rows of (left, right, kind) where kind is ``same`` (equal),
    ``changed`` (a message of each at the same place, different), ``left`` or ``right`` (only one side
    has a message there)."""
    rows: list[dict[str, Any]] = []
    for tag, left, right in _blocks(a, b, _key):
        if tag == "equal":
            rows += [{"left": x, "right": y, "kind": "same"} for x, y in zip(left, right)]
            continue
        for role_tag, lx, ry in _blocks(left, right, _role):
            if role_tag == "equal":
                rows += [{"left": x, "right": y, "kind": "changed"} for x, y in zip(lx, ry)]
            else:
                rows += [{"left": x, "right": None, "kind": "left"} for x in lx]
                rows += [{"left": None, "right": y, "kind": "right"} for y in ry]
    return rows


def _blocks(a: list[Any], b: list[Any], key: Any) -> list[tuple[str, list[Any], list[Any]]]:
    """``difflib``'s opcodes over ``key`` of each item, as (tag, the items of a, the items of b)."""
    matcher = difflib.SequenceMatcher(None, [key(x) for x in a], [key(y) for y in b], autojunk=False)
    return [(tag, a[i1:i2], b[j1:j2]) for tag, i1, i2, j1, j2 in matcher.get_opcodes()]


def _role(m: dict[str, Any]) -> str:
    return f"{m.get('role')}:{m.get('name') or ''}"


def _key(m: dict[str, Any]) -> str:
    calls = [(c.get("name"), c.get("arguments")) for c in m.get("calls") or []]
    return json.dumps([m.get("role"), m.get("name"), m.get("content"), calls], ensure_ascii=False, default=str)
