"""Extensions the tests load by dotted path: a custom filter and a custom rollout function.

The filter rejects trajectories whose final answer ends in an odd number (about half).
While the file named by ``TRAJKIT_TEST_HOLD`` exists, it waits (up to a minute)
at the first row after its first rejection, so a test can kill the filter
stage mid-run.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

_rejected = False


def hold_filter(traj: dict) -> str | None:
    global _rejected
    hold = os.environ.get("TRAJKIT_TEST_HOLD")
    if hold and _rejected:
        deadline = time.monotonic() + 60
        while Path(hold).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    numbers = re.findall(r"\d+", traj.get("final_answer") or "")
    if numbers and int(numbers[-1]) % 2:
        _rejected = True
        return "odd_answer"
    return None


async def tagged_rollout(task, backend, env, params, limits, **kw):
    """A custom rollout function: the standard loop, with its reason tagged."""
    from trajkit.envs.agent import run_episode

    row = await run_episode(task, backend, env, params, limits, **kw)
    return row | {"reason": f"custom rollout ({row['status']})"}


def crashing_filter(traj: dict) -> str | None:
    """A user filter with a bug."""
    return traj["no such field"]


def numeric_filter(traj: dict) -> str | None:
    """A user filter that returns a number instead of a reason."""
    return 1
