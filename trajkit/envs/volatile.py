"""Volatile fields of a server's tool results: values that differ between two runs of the same call (ids,
timestamps), which an extension's replay of the earlier turns' calls ignores when it compares a replayed
result with the recorded one (``trajkit.envs.agent``).

A server config declares them, ``"volatile": ["$.created_at", "$.items[*].id", "request_id"]``: a path
from the JSON result's root (``.key``, ``[index]``, ``*`` for any key or index), or a bare key, matched
at any depth. Only results that are JSON have fields; any other text is compared whole.
"""

from __future__ import annotations

import json
import re
from typing import Any

_STEP = re.compile(r"\.([A-Za-z_][\w-]*|\*)|\[(\d+|\*)\]")
_BARE_KEY = re.compile(r"[A-Za-z_][\w-]*")
MASK = object()  # what a volatile field's value compares as: equal to itself, whatever the value was

Field = tuple[str | int | None, ...] | str  # a path's steps (a key, an index, None: any), or a bare key


def parse(field: str) -> Field:
    """A declared field, checked: ValueError names what is wrong with it."""
    if not field.startswith("$"):
        if not _BARE_KEY.fullmatch(field):
            raise ValueError(f"volatile field {field!r} is neither a key nor a path like '$.created_at'")
        return field
    steps: list[str | int | None] = []
    rest = field[1:]
    while rest:
        m = _STEP.match(rest)
        if m is None:
            raise ValueError(f"volatile field {field!r}: cannot read {rest!r} (steps are .key, [index], .*, [*])")
        key, index = m.groups()
        steps.append(None if "*" in (key, index) else int(index) if index is not None else key)
        rest = rest[m.end() :]
    if not steps:
        raise ValueError("volatile field '$' is the whole result: name fields within it")
    return tuple(steps)


def masked(value: Any, fields: list[str]) -> Any:
    """``value`` (parsed JSON) with every declared field's value replaced by ``MASK``."""
    for field in fields:
        value = _mask(value, parse(field))
    return value


def _mask(value: Any, field: Field) -> Any:
    if isinstance(field, str):  # a bare key: wherever it appears
        if isinstance(value, dict):
            return {k: MASK if k == field else _mask(v, field) for k, v in value.items()}
        return [_mask(v, field) for v in value] if isinstance(value, list) else value
    if not field:
        return MASK
    head, rest = field[0], field[1:]
    if isinstance(value, dict) and not isinstance(head, int):
        return {k: _mask(v, rest) if head in (None, k) else v for k, v in value.items()}
    if isinstance(value, list) and not isinstance(head, str):
        return [_mask(v, rest) if head in (None, i) else v for i, v in enumerate(value)]
    return value


def same_result(recorded: str | None, replayed: str, fields: list[str]) -> bool:
    """Whether a replayed tool result is the recorded one, its volatile fields aside."""
    if recorded == replayed:
        return True
    if not fields or recorded is None:
        return False
    try:
        old, new = json.loads(recorded), json.loads(replayed)
    except ValueError:
        return False
    return masked(old, fields) == masked(new, fields)
