"""Tool accuracy of a trajectory against its task's target tools: computed, never judged."""

from __future__ import annotations

from collections.abc import Sequence


def tool_accuracy(target: Sequence[str] | None, called: Sequence[str] | None) -> tuple[float | None, bool | None]:
    """(share of distinct target tools the agent called, whether it called them in the target order).

    The order is correct when the target tools appear, in order, as a subsequence
    of the calls (other calls and repeats in between are allowed); a missing
    target tool makes it incorrect. A task without target tools gives (None, None).
    """
    wanted = list(dict.fromkeys(target or []))
    if not wanted:
        return None, None
    calls = list(called or [])
    share = sum(1 for t in wanted if t in calls) / len(wanted)
    it = iter(calls)
    in_order = all(any(c == t for c in it) for t in target or [])
    return share, in_order
