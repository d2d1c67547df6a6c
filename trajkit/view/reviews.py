"""Append a human review (the viewer's one write) through the store, as the ``review`` stage's shards."""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime

from trajkit import schema as S
from trajkit.store import Store

STAGE = "review"
_lock = threading.Lock()  # one writer per process at a time: shard sequence numbers are taken from the folder


def add_review(store: Store, target_kind: str, target_id: str, decision: str, reviewer: str, note: str = "") -> dict:
    """Write one review row and return it; the latest review of a row is the one in force."""
    at = datetime.now(UTC)
    row = {
        "review_id": S.content_id(target_kind, target_id, reviewer, at.isoformat()),
        "target_id": target_id,
        "target_kind": target_kind,
        "decision": decision,
        "note": note or None,
        "reviewer": reviewer,
        "reviewed_at": at,
    }
    with _lock:  # each process writes under its own rank, so two viewers of one run never take the same shard name
        store.write("reviews", STAGE, [row], rank=os.getpid())
    return row
