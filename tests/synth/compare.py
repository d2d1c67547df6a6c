"""Comparing a stage's output across runs: same ids, same rows (timings aside), no duplicates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trajkit import schema as S
from trajkit.store import Store

TIMINGS = ("model_s", "tools_s", "total_s")
CALL_TIMINGS = ("start_s", "seconds")  # of each entry of a trajectory's calls
OUTPUTS = {
    "tasks": ("tasks", "rejected"),
    "rollouts": ("trajectories",),
    "judge": ("task_quality", "trajectory_quality"),
    "filter": ("rejected",),
    "extend": ("trajectories",),
}


def stage_rows(run: Path, table: str, stage: str) -> dict[str, dict[str, Any]]:
    """A stage's rows of a table by key, timings dropped; fails on a duplicate key."""
    key = S.table(table).key
    rows = Store(run).rows(table, stage=stage)
    out = {}
    for r in rows:
        assert r[key] not in out, f"duplicate {table} row {r[key]} from stage {stage}"
        out[r[key]] = {k: v for k, v in r.items() if k not in TIMINGS}
        if r.get("calls") is not None:
            out[r[key]]["calls"] = [{k: v for k, v in c.items() if k not in CALL_TIMINGS} for c in r["calls"]]
    return out


def assert_same_output(a: Path, b: Path, stage: str) -> None:
    for table in OUTPUTS[stage]:
        left, right = stage_rows(a, table, stage), stage_rows(b, table, stage)
        assert left.keys() == right.keys(), f"{stage}/{table}: ids differ"
        assert left == right, f"{stage}/{table}: rows differ"
