"""Writing rows so a killed stage resumes cleanly: flush order, idempotent rejects, counts from the store.

A stage that writes several rows per work item (a request's candidates and
their rejects) flushes between items only, and its ``rejected`` rows before the
rows they refer to: a kill between the two leaves rejects whose rows are
missing, so the work is redone and ``RejectLog`` skips the rejects already
written (the other order would lose them). At the end, ``recount`` sets the
manifest's counts from what the store holds, so a resumed run reports the same
counts as an uninterrupted one.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq

from trajkit import schema as S
from trajkit.runner import StageContext
from trajkit.store import SHARD_RE, safe_name


class RejectLog:
    """``ctx.reject`` that writes each (row, reason) once across resumes."""

    def __init__(self, ctx: StageContext, table: str):
        self.ctx, self.table = ctx, table
        self.written = ctx.done("rejected")

    def reject(self, row_id: str, reason: str, detail: str | None = None) -> None:
        reject_id = S.content_id(self.table, row_id, self.ctx.name, reason)
        if reject_id in self.written:
            return
        self.written.add(reject_id)
        self.ctx.reject(self.table, row_id, reason, detail)


def flush_every(ctx: StageContext, rows: int, tables: tuple[str, ...]) -> Callable[[int], None]:
    """For work that writes several rows at once: a callback ``wrote(n)`` that, after ``rows``
    rows, flushes ``tables`` in the given order, so shards end only between work items.

    (The writers are opened without a shard size of their own: a work item's rows
    are never split across a shard boundary, so a killed stage leaves whole items.)
    """
    for t in tables:
        ctx.writer(t, rows_per_shard=sys.maxsize)
    pending = 0

    def wrote(n: int) -> None:
        nonlocal pending
        pending += n
        if pending >= rows:
            for t in tables:
                ctx.writer(t).flush()
            pending = 0

    return wrote


# per table, the column whose values are counted as "<prefix>.<value>" in the manifest
_TALLIES = {
    "rejected": ("reason", "rejected"),
    "trajectories": ("status", "status"),
    "task_quality": ("judge_reason", "task_quality"),
    "trajectory_quality": ("judge_reason", "trajectory_quality"),
}


def recount(ctx: StageContext, tables: tuple[str, ...]) -> None:
    """Set the manifest's counts from this stage's (and rank's) shards: ``rows.<table>``, and
    ``rejected.<reason>``, ``status.<status>`` or ``<table>.unparsed`` for the tables that have them."""
    ctx.flush()
    for table in tables:
        paths = _mine(ctx, table)
        ctx.counts[f"rows.{table}"] = sum(pq.read_metadata(p).num_rows for p in paths)
        if table not in _TALLIES:
            continue
        column, prefix = _TALLIES[table]
        for key in [k for k in ctx.counts if k.startswith(prefix + ".")]:
            del ctx.counts[key]
        values: Counter = Counter()
        for p in paths:
            values.update(pq.read_table(p, columns=[column]).column(0).to_pylist())
        if column == "judge_reason":
            unparsed = sum(n for v, n in values.items() if v is not None)
            if unparsed:
                ctx.counts[f"{prefix}.unparsed"] = unparsed
            continue
        for value, n in values.items():
            ctx.counts[f"{prefix}.{value}"] = n


def _mine(ctx: StageContext, table: str) -> list[Path]:
    stage = safe_name(ctx.name)
    return [
        p
        for p in ctx.store.shards(table, ctx.name)
        if (m := SHARD_RE.match(p.name)) and m["stage"] == stage and int(m["rank"]) == ctx.rank
    ]
