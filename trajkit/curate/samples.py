"""Sample rows from verifier results, and the pass@k rows computed over a task's samples.

A sample whose verdict is ``error`` could not be judged (the model request or
a server failed, or the verifier spec is broken): it says nothing about how
hard the task is, so pass@k counts only judged samples (``samples`` in the
passk table is that count) and a task with none gets no passk row.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Literal

from pydantic import Field

from trajkit.runner import StageContext
from trajkit.verify import difficulty, pass_at_k

Thresholds = dict[Literal["hard", "medium"], float]
THRESHOLDS_HELP = "Difficulty bounds on pass@1: hard <= hard (0.25), medium < medium (0.75); unsolved = 0, trivial = 1."
thresholds_field = Field(None, description=THRESHOLDS_HELP)


def positive_ks(ks: list[int] | None) -> list[int] | None:
    """The pass@k values a config asks for: each k at least 1 (one larger than a task's samples is skipped)."""
    if ks is not None and any(k < 1 for k in ks):
        raise ValueError(f"every k of pass@k must be at least 1; got {sorted(ks)}")
    return ks


def default_ks(n: int) -> list[int]:
    """Powers of two up to ``n``, and ``n`` itself."""
    ks, k = [], 1
    while k <= n:
        ks.append(k)
        k *= 2
    return sorted({*ks, n}) if n >= 1 else []


def passk_row(
    task_id: str, model: str, verdicts: list[str], ks: list[int] | None, thresholds: dict | None
) -> dict | None:
    """The passk row of one task from its samples' verdicts; None when none was judged."""
    judged = [v for v in verdicts if v != "error"]
    n, c = len(judged), sum(v == "pass" for v in judged)
    if n == 0:
        return None
    wanted = sorted({k for k in (ks or default_ks(n)) if 1 <= k <= n} | {1})
    p1 = pass_at_k(n, c, 1)
    return {
        "task_id": task_id,
        "model": model,
        "samples": n,
        "correct": c,
        "pass_at_1": p1,
        "pass_at": [{"k": k, "value": pass_at_k(n, c, k)} for k in wanted],
        "difficulty": difficulty(p1, thresholds),
    }


def write_passk(ctx: StageContext, model: str, ks: list[int] | None, thresholds: dict | None) -> dict[str, int]:
    """Write the passk rows of every task this stage sampled, over all of its samples.

    Runs after every sample exists, so a resumed stage computes the same rows.
    Returns the difficulty histogram.
    """
    data = ctx.store.read("samples", ["task_id", "verdict"], stage=ctx.name)
    verdicts: dict[str, list[str]] = defaultdict(list)
    for tid, v in zip(data["task_id"].to_pylist(), data["verdict"].to_pylist()):
        verdicts[tid].append(v)
    histogram: dict[str, int] = defaultdict(int)
    rows = []
    for tid in sorted(verdicts):
        row = passk_row(tid, model, verdicts[tid], ks, thresholds)
        if row is None:
            ctx.counts["passk.no_judged_samples"] += 1
            continue
        histogram[row["difficulty"]] += 1
        ctx.counts[f"difficulty.{row['difficulty']}"] += 1
        rows.append(row)
    rows = ctx.todo(rows, "passk", key="task_id")
    if rows:
        ctx.write("passk", rows)
    return dict(histogram)
