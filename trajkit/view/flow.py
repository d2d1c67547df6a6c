"""Reviewing a filtered trajectory list: the keyboard flow's rows and decisions, bulk decisions, guidelines.

A decision sets the row's whole state (``accepted.ReviewState``): accept or reject keeps its labels and
note; a label key toggles that label and keeps its decision. The flow then shows the next unreviewed row
of the list in the list's order (from the top again past the end); skip, next and previous move without
writing. A bulk decision writes one review per matching row as one batch (``accepted.add_reviews``),
each keeping what the decision does not set; ``accepted.undo_batch`` takes it back.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from trajkit.accepted import FLOW_KEYS, ReviewState, add_review, add_reviews
from trajkit.view import listing
from trajkit.view.db import LATEST, QueryError, RunDB
from trajkit.view.listing import TrajQuery
from trajkit.view.pages import message_view

GUIDELINES_FILE = "guidelines.md"
FLOW_SHARD_COLUMNS = ("messages", "prompt_tokens", "completion_tokens")  # what a flow row reads from its shard
AHEAD_KEPT = 4  # rows read ahead and not shown yet
_READER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trajkit-view-ahead")
GUIDELINES_BYTES = 200_000
NOTE_CHARS = 4000


def keymap(db: RunDB) -> dict[str, str]:
    """Each key of the flow and what it does: the flow's own (``accepted.FLOW_KEYS``) and a label's."""
    return {**FLOW_KEYS, **{label.key: f"label:{label.name}" for label in db.labels()}}


def actions(db: RunDB) -> set[str]:
    """What a decision may say: accept, reject, or toggle one of the run's labels."""
    return {"accept", "reject", *(f"label:{label.name}" for label in db.labels())}


def flow_row(
    db: RunDB, traj_id: str | None, progress: dict[str, int], unreviewed: bool = False, ahead: str | None = None
) -> dict[str, Any]:
    """What the flow shows for one row of the list (None: nothing left to review): the row, its
    conversation, its review in force (none to look up when the walk found it ``unreviewed``), and the
    ``progress`` of the filtered list. ``ahead``: the row the next step will likely show, whose
    conversation is then read while the reviewer reads this one (``read_ahead``)."""
    out: dict[str, Any] = {"row": None, "progress": progress, "labels": db.labels()}
    found = _ahead(db).pop(traj_id, None) if traj_id else None
    try:
        found = found.result() if found is not None else None
    except QueryError:  # a shard went away meanwhile: read it again below
        found = None
    if found is None and traj_id:
        found = _read_row(db, traj_id)
    if found is None:
        return out
    row, data = found
    review = None if unreviewed else listing.review_states(db, "trajectory", [row["traj_id"]]).get(row["traj_id"])
    out.update(
        row=row,
        prompt_tokens=data["prompt_tokens"],
        completion_tokens=data["completion_tokens"],
        messages=[message_view(m) for m in data["messages"] or []],
        review=review,
    )
    if ahead:
        read_ahead(db, ahead)
    return out


def _read_row(db: RunDB, traj_id: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """A row of the list table and what the flow reads of it from its shard; None if there is no such row."""
    row = listing.row_of(db, traj_id)
    if row is None:
        return None
    return row, db.row_at(row.pop("filename"), row.pop("file_row_number"), FLOW_SHARD_COLUMNS)


def _ahead(db: RunDB) -> dict[str, Future]:
    """The rows read ahead, by id (dropped with the list table, whose rows say where they are)."""
    return db.memo("flow_ahead", dict, listing.LIST_SOURCES)


def read_ahead(db: RunDB, traj_id: str) -> None:
    """Start reading a row the flow will likely show next, in the background: a shard read is most of a
    step's time, and the reviewer takes longer to read the row shown than the read takes. The last
    ``AHEAD_KEPT`` are kept."""
    ahead = _ahead(db)
    if traj_id not in ahead:
        for old in list(ahead)[: max(0, len(ahead) - AHEAD_KEPT + 1)]:
            ahead.pop(old, None)
        ahead[traj_id] = _READER.submit(_read_row, db, traj_id)


def decide(db: RunDB, traj_id: str, action: str, note: str | None, reviewer: str) -> None:
    """Write one decision on a row (``action`` one of ``actions``); ``note`` replaces the row's note when
    given."""
    current = listing.review_states(db, "trajectory", [traj_id]).get(traj_id) or {}
    decision, note, labels = _state(current, action, note)
    add_review(db.store, traj_id, "trajectory", decision, note, reviewer, check_target=False, labels=labels)


def _state(current: dict[str, Any], action: str, note: str | None, toggle: bool = True) -> tuple:
    """(decision, note, labels) after ``action`` on a row whose review in force is ``current``."""
    labels = set(current.get("labels") or ())
    decision = current.get("decision")
    if action.startswith("label:"):
        name = action.removeprefix("label:")
        labels = labels - {name} if toggle and name in labels else labels | {name}
    else:
        decision = action
    return decision, (note or current.get("note")), sorted(labels)


def bulk_count(db: RunDB, q: TrajQuery) -> int:
    """How many rows a bulk decision on this list would review."""
    return listing.progress(db, q)["total"]


def bulk(db: RunDB, q: TrajQuery, action: str, reviewer: str) -> tuple[str, int]:
    """One review per matching row, as one batch: accept or reject keeps each row's labels and note, a
    label is added to each row's labels. Returns the batch id and the rows reviewed."""
    where, params = listing.condition(db, q)
    rows = db.query(
        f'SELECT l.traj_id, rv.decision, rv.labels, rv.note FROM "{listing.list_table(db)}" l '
        f"LEFT JOIN (SELECT * FROM \"{LATEST}\" WHERE target_kind = 'trajectory') rv ON rv.target_id = l.traj_id "
        f"WHERE {where}",
        params,
    ).to_pylist()
    states = []
    for r in rows:
        decision, note, labels = _state(r, action, None, toggle=False)
        states.append(ReviewState(decision, tuple(labels), note))
    batch = add_reviews(db.store, "trajectory", [r["traj_id"] for r in rows], states, reviewer)
    return batch, len(rows)


def guidelines(db: RunDB) -> str | None:
    """The run's ``guidelines.md`` as HTML, Markdown rendered with raw HTML off (it shows as text), or
    None without the file; read again when it changes."""
    path = db.store.root / GUIDELINES_FILE
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None

    def render() -> str:
        from markdown_it import MarkdownIt

        with open(path, "rb") as f:
            text = f.read(GUIDELINES_BYTES).decode("utf-8", errors="replace")
        return MarkdownIt("commonmark", {"html": False}).render(text)

    return db.memo(f"guidelines-{st.st_mtime_ns}-{st.st_size}", render, frozenset())
