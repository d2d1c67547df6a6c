"""The one definition of "accepted": which tasks, trajectories and samples are training-ready.

A row is accepted when all of these hold (docs/schema.md, "Accepted rows"):

- no stage rejected it or its task (the ``rejected`` table), and the latest human review of it
  (or of its task) neither rejects it nor gives it a label the run's ``labels.yaml`` marks
  ``excludes``;
- trajectories: status ``completed``; its ``verdict`` (the task verifier's outcome, written with
  the row) is ``pass`` or null (no verifier); the judge's completeness is at least
  ``min_completeness`` where it was judged;
- samples: verdict ``pass``;
- tasks: the judge's ``quality_score`` is at least ``min_task_quality`` where it was judged;
  a task with verified samples has at least one that passed.

Unjudged or unverified rows are not held back: a threshold applies where there is a score.
Everything reads the DuckDB views, so the answer is the same whether or not ``synth filter``
ran. ``accepted_sql`` gives the query for callers that build on it (export, cards, viewer).

Reviews are append-only: each holds the row's whole reviewed state after it (decision, labels,
note), so the latest one is the state in force. ``add_review`` appends one; ``add_reviews`` appends
a batch (a bulk decision) in one shard under one ``batch_id``; ``undo_batch`` appends the reviews
that put each row of a batch back as it was before it. The labels a run offers (names, keys,
colours, and whether a label excludes a row) are in ``RUN/labels.yaml`` (``run_labels``).
"""

from __future__ import annotations

import getpass
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from trajkit import schema as S
from trajkit.errors import UserError
from trajkit.store import Store

REVIEWS_STAGE = "reviews"
LABELS_FILE = "labels.yaml"
# the review flow's own keys (viewer): a label's key must be another
FLOW_KEYS = {"a": "accept", "r": "reject", "s": "skip", "j": "next", "k": "previous"}
LABEL_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,39}")
LABEL_KEY = re.compile(r"[a-z0-9]")
LABEL_COLOR = re.compile(r"#[0-9a-fA-F]{3}(?:[0-9a-fA-F]{3})?")
_write_lock = threading.Lock()  # shard sequence numbers are taken from the folder: one writer per process
ACCEPTED_TABLES = ("tasks", "trajectories", "samples")


@dataclass(frozen=True)
class Thresholds:
    """Judge thresholds of the accepted definition (1-5 scales); ``None`` turns one off."""

    min_completeness: float | None = 3.0
    min_task_quality: float | None = 3.0


DEFAULT = Thresholds()

_LATEST = "row_number() OVER (PARTITION BY target_kind, target_id ORDER BY reviewed_at DESC, review_id DESC) = 1"
LATEST_REVIEWS_SQL = f"SELECT target_id, target_kind, decision, labels FROM reviews QUALIFY {_LATEST}"


@dataclass(frozen=True)
class Label:
    """A label reviewers can give a row: its name, the review flow's key for it, its colour, and whether a
    row carrying it leaves the accepted data (``excludes``)."""

    name: str
    key: str
    color: str
    excludes: bool = False


def run_labels(root: str | Path) -> list[Label]:
    """The labels of ``RUN/labels.yaml`` (none without the file); a UserError naming the first problem.

    The file: ``labels:`` then a list of ``{name, key, color, excludes}`` (``excludes`` optional,
    false by default). Names are lowercase (``[a-z0-9_.-]``, up to 40), keys one lowercase letter or
    digit other than the flow's own (``FLOW_KEYS``), colours ``#rgb`` or ``#rrggbb``."""
    import yaml

    path = Path(root) / LABELS_FILE
    if not path.is_file():
        return []
    try:
        data = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError, OSError) as e:
        raise UserError(f"{path}: not readable YAML ({str(e).splitlines()[0]})") from None
    items = data.get("labels") if isinstance(data, dict) and set(data) == {"labels"} else None
    if not isinstance(items, list):
        raise UserError(f"{path}: expected one key, labels: a list of {{name, key, color, excludes}}")
    labels: list[Label] = []
    for i, item in enumerate(items, 1):
        where = f"{path}: label {i}"
        if not isinstance(item, dict) or not {"name", "key", "color"} <= set(item) <= set(Label.__dataclass_fields__):
            raise UserError(f"{where}: give name, key and color (and optionally excludes), nothing else")
        name, key, color, excludes = (item.get(f) for f in ("name", "key", "color", "excludes"))
        if not isinstance(name, str) or not LABEL_NAME.fullmatch(name):
            raise UserError(f"{where}: name {name!r} is not 1-40 of a-z, 0-9, _ . - (starting with a letter or digit)")
        if not isinstance(key, str) or not LABEL_KEY.fullmatch(key) or key in FLOW_KEYS:
            taken = f" (the review flow's {FLOW_KEYS[key]})" if key in FLOW_KEYS else ""
            raise UserError(f"{where} ({name}): key {key!r} is not one lowercase letter or digit of its own{taken}")
        if not isinstance(color, str) or not LABEL_COLOR.fullmatch(color):
            raise UserError(f"{where} ({name}): color {color!r} is not #rgb or #rrggbb")
        if excludes is not None and not isinstance(excludes, bool):
            raise UserError(f"{where} ({name}): excludes must be true or false, not {excludes!r}")
        for other in labels:
            if name == other.name or key == other.key:
                what = "name" if name == other.name else f"key {key!r}"
                raise UserError(f"{where} ({name}): {what} is also label {other.name!r}'s")
        labels.append(Label(name, key, color, bool(excludes)))
    return labels


def excluding_labels(store: Store) -> tuple[str, ...]:
    """The names of the run's labels that take a row out of the accepted data."""
    return tuple(label.name for label in run_labels(store.root) if label.excludes)


def _not_reviewed_out(kind: str, column: str, excluded: Sequence[str], latest: str) -> str:
    out = "decision = 'reject'" + (f" OR {_has_label(excluded)}" if excluded else "")
    return f"{column} NOT IN (SELECT target_id FROM {latest} WHERE target_kind = '{kind}' AND ({out}))"


def labelled(kind: str, column: str, names: Sequence[str], latest: str = f"({LATEST_REVIEWS_SQL})") -> str:
    """SQL condition: the review in force of the row (``column`` holds its id) gives it one of these labels."""
    return f"{column} IN (SELECT target_id FROM {latest} WHERE target_kind = '{kind}' AND {_has_label(names)})"


def _has_label(names: Sequence[str]) -> str:
    return f"list_has_any(labels, [{', '.join(_lit(name) for name in names)}]::VARCHAR[])"


def _task_not_rejected() -> str:
    """A trajectory or sample of a task a stage rejected (decontamination, dedup, ...) is not accepted."""
    return "task_id NOT IN (SELECT row_id FROM rejected WHERE table_name = 'tasks')"


def _at_least(column: str, floor: float | None) -> str:
    return "true" if floor is None else f"({column} IS NULL OR {column} >= {float(floor)!r})"


def accepted_where(
    table: str,
    thresholds: Thresholds = DEFAULT,
    solved: bool = True,
    excluded: Sequence[str] = (),
    reviews: bool = True,
) -> str:
    """The SQL condition (over the table's DuckDB view) that keeps accepted rows; ``excluded``: the run's
    labels that take a row out (``excluding_labels``).

    ``solved=False`` drops the tasks' "a task with verified samples has one that passed" rule, for
    GRPO, whose data filter chooses by difficulty (``unsolved`` is a bucket a curriculum may want).
    ``reviews=False`` leaves out the human part (``reviews_where``), for a caller that applies it apart."""
    if table == "trajectories":
        parts = [
            "status = 'completed'",
            "reject_reason IS NULL",
            _task_not_rejected(),
            "(verdict IS NULL OR verdict = 'pass')",
            _at_least("completeness", thresholds.min_completeness),
        ]
    elif table == "samples":
        parts = ["verdict = 'pass'", "reject_reason IS NULL", _task_not_rejected()]
    elif table == "tasks":
        parts = [
            "reject_reason IS NULL",
            _at_least("quality_score", thresholds.min_task_quality),
            "(task_id NOT IN (SELECT task_id FROM samples) OR task_id IN (SELECT task_id FROM samples WHERE verdict = 'pass'))"
            if solved
            else "true",
        ]
    else:
        raise UserError(f"no accepted rows for table {table!r}; choose one of {', '.join(ACCEPTED_TABLES)}")
    return " AND ".join(parts + ([reviews_where(table, excluded)] if reviews else []))


def reviews_where(table: str, excluded: Sequence[str] = (), latest: str = f"({LATEST_REVIEWS_SQL})") -> str:
    """The human part of ``accepted_where``: the review in force of the row (and of its task) neither
    rejects it nor gives it an ``excluded`` label. ``latest`` holds each reviewed row's review in force
    (``target_id``, ``target_kind``, ``decision``, ``labels``)."""
    task = _not_reviewed_out("task", "task_id", excluded, latest)
    traj = _not_reviewed_out("trajectory", "traj_id", excluded, latest)
    if table == "trajectories":
        return f"{traj} AND {task}"
    if table == "samples":
        return f"{task} AND (traj_id IS NULL OR {traj})"
    return task


def accepted_sql(table: str, thresholds: Thresholds = DEFAULT, excluded: Sequence[str] = ()) -> str:
    """A query over the run's views giving the accepted rows of a table (all view columns)."""
    return f"SELECT * FROM {table} WHERE {accepted_where(table, thresholds, excluded=excluded)}"


def accepted(store: Store, table: str, thresholds: Thresholds = DEFAULT) -> pa.Table:
    """The accepted rows of ``tasks``, ``trajectories`` or ``samples`` (view columns)."""
    return store.sql(accepted_sql(table, thresholds, excluding_labels(store)))


def accepted_ids(store: Store, table: str, thresholds: Thresholds = DEFAULT, solved: bool = True) -> set[str]:
    """The keys of a table's accepted rows (``accepted_where``)."""
    key = S.table(table).key
    q = f"SELECT {key} FROM {table} WHERE {accepted_where(table, thresholds, solved, excluding_labels(store))}"
    return set(store.sql(q).column(key).to_pylist())


def latest_reviews(store: Store) -> dict[str, str]:
    """``target_id -> decision`` of each reviewed task or trajectory; the latest review wins."""
    data = store.sql(LATEST_REVIEWS_SQL)
    return dict(zip(data.column("target_id").to_pylist(), data.column("decision").to_pylist(), strict=True))


@dataclass(frozen=True)
class ReviewState:
    """What a review sets on a row: a decision (``accept``, ``reject`` or None), labels and a note. No
    decision and no labels: unreviewed."""

    decision: str | None = None
    labels: tuple[str, ...] = ()
    note: str | None = None


def add_review(
    store: Store,
    target_id: str,
    target_kind: str,
    decision: str | None,
    note: str | None = None,
    reviewer: str | None = None,
    check_target: bool = True,
    labels: Sequence[str] = (),
) -> str:
    """Append one review (an atomic shard of the ``reviews`` stage); returns its ``review_id``.

    Each process writes under its own rank (its pid), so two writers of one run (two viewers, a
    viewer and a script) never take the same shard name. ``check_target=False`` is for callers
    that have checked the target exists already (the viewer, in its in-memory copies).
    """
    _check_kind(target_kind)
    table = "tasks" if target_kind == "task" else "trajectories"
    if check_target:
        found = store.sql(f"SELECT count(*) AS n FROM {table} WHERE {S.table(table).key} = {_lit(target_id)}")
        if not found.column("n")[0].as_py():
            raise UserError(f"no {target_kind} {target_id!r} in {store.root}")
    state = ReviewState(decision, tuple(labels), note)
    return _append(store, target_kind, [target_id], [state], reviewer, None)[0]


def add_reviews(
    store: Store, target_kind: str, targets: Sequence[str], states: Sequence[ReviewState], reviewer: str | None = None
) -> str:
    """Append one review per target (the state at the same index) as one batch: one atomic shard whose
    rows share a new ``batch_id``, which this returns (``undo_batch`` takes it). The targets must exist
    (the caller checked them) and be distinct."""
    _check_kind(target_kind)
    at = datetime.now(UTC)
    batch = S.content_id("batch", target_kind, reviewer, at.isoformat(), len(targets))
    _append(store, target_kind, targets, states, reviewer, batch, at)
    return batch


def undo_batch(
    store: Store, batch_id: str, reviewer: str | None = None, con: Any = None
) -> tuple[str | None, int, int]:
    """Put each row of a batch back as it was before it, by appending a batch of reviews (the table stays
    append-only). A row whose state has changed since (reviewed again to another decision, labels or
    note) keeps it; one whose later reviews left it as the batch did (a later batch undone) is restored,
    so batches undo one after another. Returns the new batch's id (None when nothing was restored), the
    rows restored and the rows left as they are. ``con``: a DuckDB connection whose ``reviews`` view holds
    the run's reviews (default: the run's views)."""
    own = con is None
    con = store.duckdb() if own else con
    try:
        rows = con.sql(
            "WITH b AS (SELECT target_kind, target_id, reviewed_at AS b_at, review_id AS b_id, decision AS b_decision, "
            "labels AS b_labels, note AS b_note FROM reviews WHERE batch_id = ?), "
            "h AS (SELECT * FROM reviews JOIN b USING (target_kind, target_id)), "
            f"cur AS (SELECT * FROM h QUALIFY {_LATEST}), prev AS (SELECT * FROM h "
            f"WHERE reviewed_at < b_at OR (reviewed_at = b_at AND review_id < b_id) QUALIFY {_LATEST}) "
            "SELECT target_id, target_kind, cur.decision IS NOT DISTINCT FROM cur.b_decision AND cur.labels IS NOT "
            "DISTINCT FROM cur.b_labels AND cur.note IS NOT DISTINCT FROM cur.b_note AS current, prev.decision, prev.labels, "
            "prev.note FROM cur LEFT JOIN prev USING (target_kind, target_id)",
            params=[batch_id],
        ).to_arrow_table()
    finally:
        if own:
            con.close()
    if not rows.num_rows:
        raise UserError(f"no review batch {batch_id!r} in {store.root}")
    restore = [r for r in rows.to_pylist() if r["current"]]
    if not restore:
        return None, 0, rows.num_rows
    kind = restore[0]["target_kind"]
    states = [ReviewState(r["decision"], tuple(r["labels"] or ()), r["note"]) for r in restore]
    new = add_reviews(store, kind, [r["target_id"] for r in restore], states, reviewer)
    return new, len(restore), rows.num_rows - len(restore)


def _check_kind(target_kind: str) -> None:
    if target_kind not in S.REVIEW_TARGETS:
        raise UserError(f"review target kind must be one of {', '.join(S.REVIEW_TARGETS)}, not {target_kind!r}")


def _append(
    store: Store,
    kind: str,
    targets: Sequence[str],
    states: Sequence[ReviewState],
    reviewer: str | None,
    batch: str | None,
    at: datetime | None = None,
) -> list[str]:
    """Write reviews of ``targets`` as one shard; their review ids."""
    names = {label.name for label in run_labels(store.root)}
    for state in {(s.decision, s.labels) for s in states}:
        if state[0] is not None and state[0] not in S.REVIEW_DECISIONS:
            raise UserError(f"review decision must be one of {', '.join(S.REVIEW_DECISIONS)}, not {state[0]!r}")
        unknown = sorted(set(state[1]) - names)
        if unknown:
            known = ", ".join(sorted(names)) or f"none: the run has no {LABELS_FILE}"
            raise UserError(f"no label {unknown[0]!r} in the run's {LABELS_FILE} (labels: {known})")
    reviewer = reviewer or getpass.getuser()
    at = at or datetime.now(UTC)
    stamp = at.isoformat()
    ids = [S.content_id(kind, t, reviewer, stamp) for t in targets]
    data = pa.table(
        {
            "review_id": ids,
            "target_id": list(targets),
            "target_kind": [kind] * len(ids),
            "decision": [s.decision for s in states],
            "labels": [sorted(s.labels) or None for s in states],
            "note": [s.note for s in states],
            "reviewer": [reviewer] * len(ids),
            "reviewed_at": pa.array([at] * len(ids), pa.timestamp("us", tz="UTC")),
            "batch_id": [batch] * len(ids),
        }
    )
    with _write_lock:
        writer = store.writer("reviews", REVIEWS_STAGE, rank=os.getpid(), rows_per_shard=max(len(ids), 1))
        writer.write(data)
        writer.close()
    return ids


def _lit(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
