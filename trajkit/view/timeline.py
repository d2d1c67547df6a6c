"""A trajectory's timeline, as plain data: a waterfall of one bar per model or tool call (the ``calls``
column the agent loop writes), placed at its start and as long as its seconds, with its tokens and
status; the extensions of a trajectory follow it, each under its own heading, on the same scale."""

from __future__ import annotations

from typing import Any

from trajkit.view.db import RunDB

MAX_EXTENSIONS = 20  # extensions drawn under a trajectory (a trajectory rarely has more)
TIMED = "traj_id, calls, model_s, tools_s, total_s"  # what a bar group reads of an extension
WIDTH = 1000  # the SVG bars' coordinate width


def timeline(db: RunDB, t: dict[str, Any], extensions: list[dict[str, Any]]) -> dict[str, Any]:
    """The bars of ``t``'s calls and of its ``extensions``' (rows naming it their parent), on one scale.

    Each group: its trajectory's id (None for ``t`` itself), its calls as bars (label, start, seconds,
    tokens, status, the index of the message it produced, x and width in ``WIDTH`` units), and its
    totals; ``untimed`` when the row has no per-call timings (written before trajectories v4, a
    recorded or imported trace, or no call made: an extension the user simulator ended)."""
    rows = [(None, t)]
    if extensions:
        ids = [e["traj_id"] for e in extensions[:MAX_EXTENSIONS]]
        found = {r["traj_id"]: r for r in db.keyed(extension_table(db), "parent_id", [t["traj_id"]], TIMED)}
        rows += [(i, found[i]) for i in ids if i in found]
    span = max((c["start_s"] + c["seconds"] for _, row in rows for c in row.get("calls") or []), default=0.0) or 1.0
    groups = []
    for traj_id, row in rows:
        calls = row.get("calls") or []
        bars = [_bar(c, span) for c in calls]
        groups.append(
            {
                "traj_id": traj_id,
                "bars": bars,
                "untimed": not calls,
                "model_s": row.get("model_s"),
                "tools_s": row.get("tools_s"),
                "total_s": row.get("total_s"),
            }
        )
    return {"groups": groups, "span": span, "more": max(0, len(extensions) - MAX_EXTENSIONS), "width": WIDTH}


def _bar(c: dict[str, Any], span: float) -> dict[str, Any]:
    model = c["kind"] == "model"
    tokens = (c.get("prompt_tokens") or 0) + (c.get("completion_tokens") or 0) if model else None
    status = c.get("status") or ""
    bad = status in ("error", "length")
    return {
        "kind": c["kind"],
        "name": "model" if model else c.get("name") or "tool",
        "start": c["start_s"],
        "seconds": c["seconds"],
        "prompt_tokens": c.get("prompt_tokens"),
        "completion_tokens": c.get("completion_tokens"),
        "tokens": tokens,
        "status": status,
        "message": c.get("message"),
        "css": f"{c['kind']} {'bad' if bad else 'ok'}",
        "x": round(c["start_s"] / span * WIDTH, 2),
        "w": max(round(c["seconds"] / span * WIDTH, 2), 1.0),
    }


def extension_table(db: RunDB) -> str:
    """An in-memory copy of what the timeline shows of every trajectory that extends another, kept in the
    order of its parent's hash: a trajectory's extensions are one lookup, not one shard read each."""
    shards = db.shards_of("trajectories")
    return db.cached(
        "extensions",
        lambda: f"SELECT parent_id, {TIMED} FROM {shards} WHERE parent_id IS NOT NULL",
        key="parent_id",
        reads={"trajectories"},
    )
