"""``curate.split``: train / held-out by a hash of each task's near-duplicate cluster.

The side of a task is decided by ``sha256(seed:cluster_id)``, where the cluster
comes from the ``dedup`` table when it exists (else the task is its own
cluster), so near duplicates land on the same side. A side depends on nothing
else: the same seed and clusters give the same split in any run, on any
number of shards. It is not stable under new data, though: a cluster's id is
its smallest task id, so tasks added to a run (and deduplicated again) can give
a cluster a new id, or merge two clusters, and move their tasks to the other
side. Tasks another stage rejected get no split. ``held_out: 0`` is allowed
(train on every task, evaluate elsewhere); the stage then says that no
held-out split was made, in its output and its manifest's summary.
"""

from __future__ import annotations

import hashlib
from typing import Any

from pydantic import Field

from trajkit.config import StageConfig
from trajkit.curate.pool import active_tasks, annotations
from trajkit.runner import StageContext, StageSpec


class SplitConfig(StageConfig):
    held_out: float = Field(
        0.1, ge=0.0, le=1.0, description="Fraction of clusters held out (0: none, every task is train, and said so)."
    )
    seed: str = Field("trajkit", description="Changes which clusters are held out.")


def side(cluster_id: str, held_out: float, seed: str) -> str:
    """``held_out`` for about a ``held_out`` fraction of cluster ids, else ``train``."""
    h = int.from_bytes(hashlib.sha256(f"{seed}:{cluster_id}".encode()).digest()[:8], "big") / 2**64
    return "held_out" if h < held_out else "train"


def run_split(ctx: StageContext, cfg: SplitConfig) -> dict[str, Any]:
    clusters = {tid: r["cluster_id"] for tid, r in annotations(ctx.store, "dedup", ["cluster_id"]).items()}
    ids = sorted(t["task_id"] for t in active_tasks(ctx.store, ctx.name, []))
    rows = [{"task_id": tid, "split": side(clusters.get(tid, tid), cfg.held_out, cfg.seed)} for tid in ids]
    ctx.counts.update(f"split.{r['split']}" for r in rows)
    rows = ctx.todo(rows, "splits", key="task_id")
    for start in range(0, len(rows), 5000):
        ctx.write("splits", rows[start : start + 5000])
    summary: dict[str, Any] = {"tasks": len(ids), "clusters_from_dedup": bool(clusters)}
    if ids and not ctx.counts["split.held_out"]:
        why = (
            "--held-out 0"
            if cfg.held_out == 0
            else f"no cluster fell on the held-out side at --held-out {cfg.held_out}"
        )
        summary["note"] = (
            f"no held-out split was made ({why}): every task is train, and eval passk and eval tools, which read "
            "split held_out by default, find no tasks"
        )
        ctx.log(summary["note"])
    return summary


SPLIT = StageSpec(
    "curate.split",
    SplitConfig,
    run_split,
    inputs=("tasks", "dedup"),
    outputs=("splits",),
    help="Assign train / held_out by a hash of each task's dedup cluster (one side per cluster).",
)
