"""The tasks a curate stage works on: every task once, minus those another stage rejected.

A stage's own rejections are not excluded, so a resumed stage sees the same
pool as its first run. Rows come in the store's stable shard order.
"""

from __future__ import annotations

from typing import Any

from trajkit.store import Store


def rejected_elsewhere(store: Store, stage: str, table: str = "tasks") -> set[str]:
    """Ids of ``table`` rows that a stage other than ``stage`` rejected."""
    data = store.read("rejected", ["row_id", "table_name", "stage"])
    return {
        r
        for r, t, s in zip(data["row_id"].to_pylist(), data["table_name"].to_pylist(), data["stage"].to_pylist())
        if t == table and s != stage
    }


def active_tasks(store: Store, stage: str, columns: list[str] | None = None) -> list[dict[str, Any]]:
    """Task rows not rejected by another stage; the first row wins if an id repeats."""
    cols = None if columns is None else list(dict.fromkeys(["task_id", *columns]))
    data = store.read("tasks", cols)
    gone = rejected_elsewhere(store, stage)
    seen: set[str] = set()
    out = []
    for row in data.to_pylist():
        tid = row["task_id"]
        if tid in gone or tid in seen:
            continue
        seen.add(tid)
        out.append(row)
    return out


def annotations(store: Store, table: str, columns: list[str]) -> dict[str, dict[str, Any]]:
    """An annotation table (passk, dedup, splits, ...) keyed by task id; where several stages
    wrote one task, the row of the stage that finished last wins (``Store.latest``, as in SQL views)."""
    return {r["task_id"]: r for r in store.latest(table, ["task_id", *columns]).to_pylist()}
