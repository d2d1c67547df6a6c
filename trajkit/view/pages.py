"""What each page shows: read from the run's views (rows looked up by key in in-memory copies of their light
columns), returned as plain dicts and lists, never markup."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from trajkit.accepted import accepted_where, reviews_where
from trajkit.view.db import LATEST, RunDB
from trajkit.view.diff import diff_rows
from trajkit.view.listing import ListQuery, by_task, list_table, review_states
from trajkit.view.timeline import timeline

PAGE_SIZE = 50
LONG_TEXT = 1500  # characters of a message or tool result shown before it is folded
MAX_TRACE_TOKENS = 20_000
# what the trajectory page reads from the row's shard; its light columns come from the in-memory copy
TRAJECTORY_SHARD_COLUMNS = (
    "backend",
    "sampling",
    "messages",
    "end_state",
    "prompt_tokens",
    "completion_tokens",
    "total_s",
    "token_ids",
    "loss_mask",
    "logprobs",
    "calls",  # absent from shards written before trajectories v4: read as null
)
TASK_SORTS = {
    "task": "task_id",
    "source": "source",
    "mode": "mode",
    "difficulty": "difficulty",
    "pass_at_1": "pass_at_1",
    "quality": "quality_score",
    "split": "split",
    "stage": "stage",
}
TASK_FILTERS = ("source", "mode", "server", "difficulty", "split", "stage", "reject", "review", "min_quality", "q")


# ---------------------------------------------------------------- run
def run_page(db: RunDB) -> dict[str, Any]:
    """Tables with row counts, each stage's manifest, the card's plots and whether the card is stale."""
    store = db.store
    tables = [{"name": t, "rows": store.count(t), "shards": len(store.shards(t))} for t in store.tables()]
    manifests = []
    for m in store.manifests():
        manifests.append({**m, "config_json": json.dumps(m.get("config", {}), indent=2, sort_keys=True)})
    card = store.root / "card" / "README.md"
    plots = sorted(p.name for p in (store.root / "card" / "plots").glob("*.png"))
    newest = db.rows("SELECT max(reviewed_at) AS t FROM reviews")[0]["t"]
    card_time = card.stat().st_mtime if card.is_file() else None
    return {
        "tables": tables,
        "manifests": manifests,
        "plots": plots,
        "card": card.is_file(),
        "card_stale": bool(card_time and newest and newest.timestamp() > card_time),
        "newest_review": newest,
    }


# ---------------------------------------------------------------- tasks
@dataclass
class TaskQuery(ListQuery):
    """The tasks page's query."""

    FILTERS: ClassVar[tuple[str, ...]] = TASK_FILTERS
    SORTS: ClassVar[Mapping[str, str]] = TASK_SORTS

    def by_review(self) -> bool:
        """Whether the tasks are filtered on their review (the latest review of each is joined as ``rv``)."""
        return self.filters.get("review") in ("accept", "reject", "none")

    def where(self) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        for col in ("source", "mode", "difficulty", "split", "stage"):
            if col in self.filters:
                clauses.append(f"{col} = ?")
                params.append(self.filters[col])
        f = self.filters
        if "server" in f:
            clauses.append("list_contains(server_ids, ?)")
            params.append(f["server"])
        if f.get("reject") == "none":
            clauses.append("reject_reason IS NULL")
        elif "reject" in f:
            clauses.append("list_contains(string_split(reject_reason, '; '), ?)")
            params.append(f["reject"])
        if "min_quality" in f:
            try:
                params.append(float(f["min_quality"]))
                clauses.append("quality_score >= ?")
            except ValueError:
                pass
        if "q" in f:
            clauses.append("contains(lower(question), lower(?))")
            params.append(f["q"])
        if self.by_review() and f["review"] != "none":
            clauses.append("rv.decision = ?")
            params.append(f["review"])
        elif self.by_review():
            clauses.append("rv.decision IS NULL")
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def tasks_page(db: RunDB, q: TaskQuery) -> dict[str, Any]:
    """One page of the matching tasks: their ids are sorted alone (narrow rows), then their columns looked up."""
    where, params = q.where()
    tasks = tasks_table(db)
    source = f'"{tasks}" tasks'
    if q.by_review():
        source += (
            f" LEFT JOIN (SELECT * FROM \"{LATEST}\" WHERE target_kind = 'task') rv ON rv.target_id = tasks.task_id"
        )
    order = f"{TASK_SORTS[q.sort]} {'DESC' if q.desc else 'ASC'} NULLS LAST, task_id"
    total = db.rows(f"SELECT count(*) AS n FROM {source}{where}", params)[0]["n"]
    pages = max(1, -(-total // PAGE_SIZE))
    q.page = min(q.page, pages)
    keys = db.rows(
        f"SELECT task_id FROM {source}{where} ORDER BY {order} LIMIT ? OFFSET ?",
        [*params, PAGE_SIZE, (q.page - 1) * PAGE_SIZE],
    )
    ids = list(dict.fromkeys(k["task_id"] for k in keys))  # a task_id written twice is one id, two rows
    rows = db.keyed(
        tasks,
        "task_id",
        ids,
        "task_id, source, mode, question, server_ids, difficulty, pass_at_1, quality_score, split, stage, reject_reason",
    )
    rows.sort(key=lambda r: ids.index(r["task_id"]))
    reviews = review_states(db, "task", ids)
    names = server_names(db)
    for r in rows:
        r["servers"] = [names.get(s, s) for s in r["server_ids"] or []]
        r["question"] = _clip(r["question"], 200)
        r["review"] = reviews.get(r["task_id"])
    return {"rows": rows, "total": total, "pages": pages, "facets": facets(db)}


def tasks_table(db: RunDB) -> str:
    """The tasks view with its annotations, in memory without the raw generator output."""
    return db.cached("tasks", lambda: "SELECT * EXCLUDE (raw_output) FROM tasks", key="task_id")


def facets(db: RunDB) -> dict[str, list[Any]]:
    """The values each filter offers."""
    return db.memo("facets", lambda: _facets(db))


def _facets(db: RunDB) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    tasks = tasks_table(db)
    for col in ("source", "mode", "difficulty", "split", "stage"):
        out[col] = [
            r["v"] for r in db.rows(f'SELECT DISTINCT {col} AS v FROM "{tasks}" WHERE v IS NOT NULL ORDER BY 1')
        ]
    out["server"] = sorted(server_names(db).items(), key=lambda kv: kv[1])
    out["reject"] = [
        r["v"] for r in db.rows("SELECT DISTINCT reason AS v FROM rejected WHERE table_name = 'tasks' ORDER BY 1")
    ]
    return out


def server_names(db: RunDB) -> dict[str, str]:
    return db.memo(
        "server_names", lambda: {r["server_id"]: r["name"] for r in db.rows("SELECT server_id, name FROM servers")}
    )


# ---------------------------------------------------------------- task
def task_page(db: RunDB, task_id: str) -> dict[str, Any] | None:
    rows = db.keyed(tasks_table(db), "task_id", [task_id])
    if not rows:
        return None
    task = rows[0]
    if not task["question"]:  # an unparsed generation: show what the generator wrote
        task["raw_output"] = db.rows("SELECT raw_output FROM tasks WHERE task_id = ?", [task_id])[0]["raw_output"]
    verifier = task.get("verifier") or {}
    light = light_tables(db)
    ids = [r["traj_id"] for r in by_task(db, task_id)]
    trajectories = db.keyed(light["trajectories"], "traj_id", ids, "* EXCLUDE (_h, filename, file_row_number, rejects)")
    notes = annotations(db, light, [t["traj_id"] for t in trajectories])
    samples = db.rows(
        f'SELECT * EXCLUDE (_h) FROM "{light["samples"]}" WHERE task_id = ? ORDER BY model, sample_index', [task_id]
    )
    verdicts = {s["traj_id"]: s for s in samples if s["traj_id"]}
    reviews = review_states(db, "trajectory", list(notes))
    accepted = accepted_in(db, "trajectories", list(notes))
    for t in trajectories:
        t["accepted"] = t["traj_id"] in accepted
        sample = verdicts.get(t["traj_id"], {})
        verdict = t["verdict"] if t["verdict"] is not None else sample.get("verdict")  # the row's own, or its sample's
        t.update(notes[t["traj_id"]], verdict=verdict, reward=sample.get("score"))
        t["review"] = reviews.get(t["traj_id"])
    trajectories.sort(key=lambda t: (t["model"] or "", t["rollout_index"] or 0, t["traj_id"]))
    evals = db.rows(
        "SELECT model, samples, correct, pass_at FROM eval_passk WHERE task_id = ? ORDER BY model", [task_id]
    )
    return {
        "task": task,
        "accepted": bool(accepted_in(db, "tasks", [task_id])),
        "servers": [server_names(db).get(s, s) for s in task.get("server_ids") or []],
        "verifier_kind": verifier.get("kind"),
        "verifier_spec": pretty_json(verifier.get("spec")),
        "metadata": pretty_json(task.get("metadata")),
        "trajectories": trajectories,
        "samples": samples,
        "evals": evals,
        **reviews_of(db, "task", task_id),
    }


# ---------------------------------------------------------------- trajectory
def accepted_in(db: RunDB, table: str, ids: list[str]) -> set[str]:
    """Which of these tasks or trajectories are accepted (trajkit/accepted.py's one definition): the stages'
    part from an in-memory list built once per change of the tables it reads (a review is none of them),
    the human part (``reviews_where``) against the in-memory reviews in force."""
    key = "task_id" if table == "tasks" else "traj_id"
    cached = db.cached(
        f"accepted_{table}", lambda: f"SELECT {key} FROM {table} WHERE {accepted_where(table, reviews=False)}", key=key
    )
    staged = {r[key] for r in db.keyed(cached, key, ids, key)}
    if not staged:
        return set()
    light = tasks_table(db) if table == "tasks" else list_table(db)
    excluded = [label.name for label in db.labels() if label.excludes]
    human = reviews_where(table, excluded, f'"{LATEST}"')
    return {r[key] for r in db.keyed(light, key, sorted(staged), key, human)}


def light_tables(db: RunDB) -> dict[str, str]:
    """In-memory copies of the light columns the task and trajectory pages look up by key."""
    return {
        "trajectories": list_table(db),
        "trajectory_quality": db.cached(
            "trajectory_quality", lambda: "SELECT * EXCLUDE (judge_raw) FROM trajectory_quality", key="traj_id"
        ),
        "samples": db.cached(
            "samples",
            lambda: (
                "SELECT sample_id, task_id, sample_index, model, verdict, score, runtime_s, left(completion, 400) "
                "AS completion, traj_id, details FROM samples"
            ),
            key="traj_id",
        ),
        "rejected": db.cached(
            "rejected",
            lambda: (
                "SELECT table_name, row_id, string_agg(DISTINCT reason, '; ' ORDER BY reason) AS reject_reason "
                "FROM rejected GROUP BY ALL"
            ),
            key="row_id",
        ),
    }


def trajectory_page(db: RunDB, traj_id: str) -> dict[str, Any] | None:
    """A trajectory with its conversation, token trace, timeline (its extensions' under it), the other
    trajectories of its task (to diff with) and its reviews."""
    light = light_tables(db)
    found = db.keyed(light["trajectories"], "traj_id", [traj_id], "* EXCLUDE (_h, rejects)")
    if not found:
        return None
    t = found[0]
    t.update(db.row_at(t.pop("filename"), t.pop("file_row_number"), TRAJECTORY_SHARD_COLUMNS))
    t.update(annotations(db, light, [traj_id])[traj_id])
    samples = db.keyed(light["samples"], "traj_id", [traj_id], "verdict, score, details")
    siblings = by_task(db, t["task_id"])
    return {
        "t": t,
        "accepted": bool(accepted_in(db, "trajectories", [traj_id])),
        "messages": [message_view(m) for m in t.get("messages") or []],
        "tokens": token_trace(t),
        "sample": samples[0] if samples else None,
        "sampling": t.get("sampling") or {},
        "timeline": timeline(db, t, [s for s in siblings if s["parent_id"] == traj_id]),
        "siblings": [s for s in siblings if s["traj_id"] != traj_id],
        "labels": db.labels(),
        **reviews_of(db, "trajectory", traj_id),
    }


def annotations(db: RunDB, light: dict[str, str], ids: list[str]) -> dict[str, dict[str, Any]]:
    """Judge columns and reject reasons of some trajectories, by id: what the trajectories view
    joins on, looked up by key instead of joined over the whole table."""
    out: dict[str, dict[str, Any]] = {i: {} for i in ids}
    for r in db.keyed(light["trajectory_quality"], "traj_id", ids):
        out[r.pop("traj_id")].update(r)
    for r in db.keyed(light["rejected"], "row_id", ids, "row_id, reject_reason", "table_name = 'trajectories'"):
        out[r["row_id"]]["reject_reason"] = r["reject_reason"]
    return out


def message_view(m: dict[str, Any]) -> dict[str, Any]:
    """A message for display: text fields kept as text, JSON pretty-printed, long parts marked to fold."""
    content = m.get("content") or ""
    if m.get("role") == "tool":
        content = pretty_json(content) or content
    calls = [
        {"id": c.get("id"), "name": c.get("name"), "arguments": pretty_json(c.get("arguments")) or c.get("arguments")}
        for c in m.get("tool_calls") or []
    ]
    return {
        "role": m.get("role"),
        "name": m.get("name"),
        "tool_call_id": m.get("tool_call_id"),
        "content": content,
        "long": len(content) > LONG_TEXT,
        "reasoning": m.get("reasoning_content"),
        "calls": calls,
    }


def token_trace(t: dict[str, Any]) -> dict[str, Any] | None:
    """Token ids with their loss mask and logprob (and text where the model's tokenizer is local), as
    JSON for the page's script to lay out: thousands of tokens cost the server one ``json.dumps``."""
    ids = t.get("token_ids")
    if not ids:
        return None
    shown = ids[:MAX_TRACE_TOKENS]
    mask = (t.get("loss_mask") or [None] * len(ids))[: len(shown)]
    logprobs = [None if x is None else round(x, 4) for x in (t.get("logprobs") or [None] * len(ids))[: len(shown)]]
    texts = _token_texts(t.get("model") or "", tuple(shown))
    data = {"ids": shown, "text": texts, "mask": mask, "logprobs": logprobs}
    return {
        "json": json.dumps(data, ensure_ascii=False),
        "shown": len(shown),
        "total": len(ids),
        "sampled": sum(1 for x in mask if x == 1),
        "decoded": bool(texts),
    }


def _token_texts(model: str, ids: tuple[int, ...]) -> list[str] | None:
    tok = _tokenizer(model)
    if tok is None:
        return None
    return [tok.decode([i]) for i in ids]


@lru_cache(maxsize=4)
def _tokenizer(model: str):
    """The model's tokenizer if it is a local directory (never downloaded); None otherwise."""
    if not model or not (Path(model) / "tokenizer_config.json").is_file():
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model, local_files_only=True)
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------- reviews, compare
def exists(db: RunDB, kind: str, target_id: str) -> bool:
    """Whether a task or trajectory with this id is in the run (what a review may name)."""
    table, key = (tasks_table(db), "task_id") if kind == "task" else (light_tables(db)["trajectories"], "traj_id")
    return bool(db.keyed(table, key, [target_id], key))


def reviews_of(db: RunDB, kind: str, target_id: str) -> dict[str, Any]:
    """Every review of one row, newest first; the first is the one in force (None when it says nothing:
    an undo put the row back to unreviewed)."""
    history = db.rows(
        "SELECT decision, labels, note, reviewer, reviewed_at, batch_id FROM reviews "
        "WHERE target_kind = ? AND target_id = ? ORDER BY reviewed_at DESC, review_id DESC",
        [kind, target_id],
    )
    review = history[0] if history and (history[0]["decision"] or history[0]["labels"]) else None
    return {"review": review, "review_history": history}


def diff_page(db: RunDB, a: str | None, b: str | None) -> dict[str, Any]:
    """Two trajectories of one task side by side, their messages aligned (``diff.diff_rows``); an error
    message instead when one is missing or they belong to different tasks."""
    table = list_table(db)
    found = {r["traj_id"]: r for r in db.keyed(table, "traj_id", [x for x in (a, b) if x], "* EXCLUDE (_h, rejects)")}
    if a not in found or b not in found:
        return {"error": "give two trajectories of the run: ?a=ID&b=ID", "a": None, "b": None}
    if found[a]["task_id"] != found[b]["task_id"]:
        return {"error": "these two trajectories belong to different tasks", "a": found[a], "b": found[b]}
    sides = []
    for x in (a, b):
        row = found[x]
        row.update(db.row_at(row.pop("filename"), row.pop("file_row_number"), ("messages", "total_s")))
        sides.append(row)
    messages = [[message_view(m) | {"index": i} for i, m in enumerate(r["messages"] or [])] for r in sides]
    rows = diff_rows(*messages)
    return {"error": None, "a": sides[0], "b": sides[1], "rows": rows, "same": sum(r["kind"] == "same" for r in rows)}


def compare_page(db: RunDB, a: str | None, b: str | None) -> dict[str, Any]:
    """Two models' eval pass@1 on their common tasks, largest differences first."""
    models = [r["model"] for r in db.rows("SELECT DISTINCT model FROM eval_passk ORDER BY 1")]
    a = a if a in models else (models[0] if models else None)
    b = b if b in models else (models[1] if len(models) > 1 else a)
    rows = []
    if a and b:
        rows = db.rows(
            "SELECT x.task_id, t.question, x.correct / x.samples AS a, y.correct / y.samples AS b, "
            "y.correct / y.samples - x.correct / x.samples AS diff, x.difficulty "
            "FROM eval_passk x JOIN eval_passk y ON x.task_id = y.task_id AND x.model = ? AND y.model = ? "
            f'LEFT JOIN "{tasks_table(db)}" t ON t.task_id = x.task_id ORDER BY abs(diff) DESC, x.task_id LIMIT 500',
            [a, b],
        )
    for r in rows:
        r["question"] = _clip(r["question"], 160)
    mean = lambda k: sum(r[k] for r in rows) / len(rows) if rows else None
    return {"models": models, "a": a, "b": b, "rows": rows, "mean_a": mean("a"), "mean_b": mean("b")}


# ---------------------------------------------------------------- helpers
def pretty_json(text: str | None) -> str | None:
    """JSON text indented for reading; None if it is not JSON."""
    if not text:
        return None
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (ValueError, TypeError):
        return None


def _clip(text: str | None, n: int) -> str | None:
    return text if text is None or len(text) <= n else text[: n - 1] + "…"
