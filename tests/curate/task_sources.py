"""Custom task sources loaded by dotted path in the import tests."""

from __future__ import annotations


def arithmetic(count: int = 3, start: int = 1):
    """Records of sums, answered by the math verifier."""
    for i in range(int(start), int(start) + int(count)):
        yield {"id": f"sum-{i}", "problem": f"What is {i} + {i}?", "answer": str(2 * i)}


def not_dicts():
    return ["just a string"]


def crashes():
    raise RuntimeError("source is down")
