"""The one definition of "accepted": which tasks, trajectories and samples are training-ready.

A row is accepted when all of these hold (docs/schema.md, "Accepted rows"):

- no stage rejected it or its task (the ``rejected`` table) and the latest human review of it
  (or of its task) is not ``reject``;
- trajectories: status ``completed``; its ``verdict`` (the task verifier's outcome, written with
  the row) is ``pass`` or null (no verifier); the judge's completeness is at least
  ``min_completeness`` where it was judged;
- samples: verdict ``pass``;
- tasks: the judge's ``quality_score`` is at least ``min_task_quality`` where it was judged;
  a task with verified samples has at least one that passed.

Unjudged or unverified rows are not held back: a threshold applies where there is a score.
Everything reads the DuckDB views, so the answer is the same whether or not ``synth filter``
ran. ``accepted_sql`` gives the query for callers that build on it (export, cards, viewer).
"""

from __future__ import annotations

import getpass
import os
import threading
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa

from trajkit import schema as S
from trajkit.errors import UserError
from trajkit.store import Store

REVIEWS_STAGE = "reviews"
_write_lock = threading.Lock()  # shard sequence numbers are taken from the folder: one writer per process
ACCEPTED_TABLES = ("tasks", "trajectories", "samples")


@dataclass(frozen=True)
class Thresholds:
    """Judge thresholds of the accepted definition (1-5 scales); ``None`` turns one off."""

    min_completeness: float | None = 3.0
    min_task_quality: float | None = 3.0


DEFAULT = Thresholds()

LATEST_REVIEWS_SQL = (
    "SELECT target_id, target_kind, decision FROM reviews "
    "QUALIFY row_number() OVER (PARTITION BY target_kind, target_id ORDER BY reviewed_at DESC, review_id DESC) = 1"
)


def _not_reviewed_out(kind: str, column: str) -> str:
    return (
        f"{column} NOT IN (SELECT target_id FROM ({LATEST_REVIEWS_SQL}) "
        f"WHERE target_kind = '{kind}' AND decision = 'reject')"
    )


def _task_not_rejected() -> str:
    """A trajectory or sample of a task a stage rejected (decontamination, dedup, ...) is not accepted."""
    return "task_id NOT IN (SELECT row_id FROM rejected WHERE table_name = 'tasks')"


def _at_least(column: str, floor: float | None) -> str:
    return "true" if floor is None else f"({column} IS NULL OR {column} >= {float(floor)!r})"


def accepted_where(table: str, thresholds: Thresholds = DEFAULT, solved: bool = True) -> str:
    """The SQL condition (over the table's DuckDB view) that keeps accepted rows.

    ``solved=False`` drops the tasks' "a task with verified samples has one that passed" rule, for
    GRPO, whose data filter chooses by difficulty (``unsolved`` is a bucket a curriculum may want)."""
    if table == "trajectories":
        parts = [
            "status = 'completed'",
            "reject_reason IS NULL",
            _task_not_rejected(),
            "(verdict IS NULL OR verdict = 'pass')",
            _at_least("completeness", thresholds.min_completeness),
            _not_reviewed_out("trajectory", "traj_id"),
            _not_reviewed_out("task", "task_id"),
        ]
    elif table == "samples":
        parts = [
            "verdict = 'pass'",
            "reject_reason IS NULL",
            _task_not_rejected(),
            _not_reviewed_out("task", "task_id"),
            f"(traj_id IS NULL OR {_not_reviewed_out('trajectory', 'traj_id')})",
        ]
    elif table == "tasks":
        parts = [
            "reject_reason IS NULL",
            _at_least("quality_score", thresholds.min_task_quality),
            "(task_id NOT IN (SELECT task_id FROM samples) OR task_id IN (SELECT task_id FROM samples WHERE verdict = 'pass'))"
            if solved
            else "true",
            _not_reviewed_out("task", "task_id"),
        ]
    else:
        raise UserError(f"no accepted rows for table {table!r}; choose one of {', '.join(ACCEPTED_TABLES)}")
    return " AND ".join(parts)


def accepted_sql(table: str, thresholds: Thresholds = DEFAULT) -> str:
    """A query over the run's views giving the accepted rows of a table (all view columns)."""
    return f"SELECT * FROM {table} WHERE {accepted_where(table, thresholds)}"


def accepted(store: Store, table: str, thresholds: Thresholds = DEFAULT) -> pa.Table:
    """The accepted rows of ``tasks``, ``trajectories`` or ``samples`` (view columns)."""
    return store.sql(accepted_sql(table, thresholds))


def accepted_ids(store: Store, table: str, thresholds: Thresholds = DEFAULT, solved: bool = True) -> set[str]:
    """The keys of a table's accepted rows (``accepted_where``)."""
    key = S.table(table).key
    q = f"SELECT {key} FROM {table} WHERE {accepted_where(table, thresholds, solved)}"
    return set(store.sql(q).column(key).to_pylist())


def latest_reviews(store: Store) -> dict[str, str]:
    """``target_id -> decision`` of each reviewed task or trajectory; the latest review wins."""
    data = store.sql(LATEST_REVIEWS_SQL)
    return dict(zip(data.column("target_id").to_pylist(), data.column("decision").to_pylist(), strict=True))


def add_review(
    store: Store,
    target_id: str,
    target_kind: str,
    decision: str,
    note: str | None = None,
    reviewer: str | None = None,
    check_target: bool = True,
) -> str:
    """Append one review (an atomic shard of the ``reviews`` stage); returns its ``review_id``.

    Each process writes under its own rank (its pid), so two writers of one run (two viewers, a
    viewer and a script) never take the same shard name. ``check_target=False`` is for callers
    that have checked the target exists already (the viewer, in its in-memory copies).
    """
    if target_kind not in S.REVIEW_TARGETS:
        raise UserError(f"review target kind must be one of {', '.join(S.REVIEW_TARGETS)}, not {target_kind!r}")
    if decision not in S.REVIEW_DECISIONS:
        raise UserError(f"review decision must be one of {', '.join(S.REVIEW_DECISIONS)}, not {decision!r}")
    table = "tasks" if target_kind == "task" else "trajectories"
    if check_target:
        found = store.sql(f"SELECT count(*) AS n FROM {table} WHERE {S.table(table).key} = {_lit(target_id)}")
        if not found.column("n")[0].as_py():
            raise UserError(f"no {target_kind} {target_id!r} in {store.root}")
    reviewer = reviewer or getpass.getuser()
    at = datetime.now(UTC)
    review_id = S.content_id(target_kind, target_id, reviewer, at.isoformat())
    row = {
        "review_id": review_id,
        "target_id": target_id,
        "target_kind": target_kind,
        "decision": decision,
        "note": note,
        "reviewer": reviewer,
        "reviewed_at": at,
    }
    with _write_lock:
        store.write("reviews", REVIEWS_STAGE, [row], rank=os.getpid())
    return review_id


def _lit(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
