"""Custom filters loaded by dotted path in the filter tests."""

from __future__ import annotations


def no_lists(row: dict) -> str | None:
    """Reject questions that mention lists."""
    return "mentions_list" if "list" in (row.get("question") or "").lower() else None


def broken(row: dict) -> str | None:
    raise KeyError("oops")


def wrong_type(row: dict) -> int:
    return 3


NOT_CALLABLE = 42
