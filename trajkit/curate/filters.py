"""``curate.filter``: rule filters over tasks; each returns keep (None) or a reason.

A filter is ``fn(row: dict) -> str | None`` (``trajkit.plugins.RowFilter``, called through
``plugins.apply_filter``, as ``synth filter`` calls its own). The row is the task (``task_id``,
``source``, ``question``, ``verifier``, ``metadata``, ...) plus its pass@k
annotation (``difficulty``, ``pass_at_1``; None when the task has none) and
its verified samples (``scores``: the list of sample scores, ``verdicts``).
Filters run in order and the first reason rejects the task; rejected tasks
stay in ``tasks`` with a ``rejected`` row, and every reason is counted.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Literal

from pydantic import Field, model_validator

from trajkit import schema as S
from trajkit.config import StageConfig
from trajkit.curate.pool import active_tasks, annotations
from trajkit.errors import UserError
from trajkit.plugins import RowFilter, apply_filter, load_filters
from trajkit.runner import StageContext, StageSpec

Difficulty = Literal[S.DIFFICULTIES]  # type: ignore[valid-type]


def min_chars(n: int) -> RowFilter:
    """Reject questions shorter than ``n`` characters (``too_short``)."""
    return lambda row: "too_short" if len((row.get("question") or "").strip()) < n else None


def max_chars(n: int) -> RowFilter:
    """Reject questions longer than ``n`` characters (``too_long``)."""
    return lambda row: "too_long" if len(row.get("question") or "") > n else None


def has_verifier(row: dict[str, Any]) -> str | None:
    """Reject tasks that nothing can verify (``no_verifier``)."""
    kind = (row.get("verifier") or {}).get("kind")
    return "no_verifier" if kind in (None, "", "none") else None


def difficulty_in(allowed: list[str]) -> RowFilter:
    """Keep only tasks whose pass@k difficulty is one of ``allowed`` (``no_difficulty``, ``difficulty``)."""

    def check(row: dict[str, Any]) -> str | None:
        if row.get("difficulty") is None:
            return "no_difficulty"
        return None if row["difficulty"] in allowed else "difficulty"

    return check


def zero_variance(row: dict[str, Any]) -> str | None:
    """Reject groups whose judged samples all scored the same (all pass or all fail): GRPO
    learns nothing from a group without reward variance (``zero_variance``).
    Samples with verdict ``error`` were not judged and do not count; tasks
    without judged samples are kept."""
    verdicts = row.get("verdicts") or [None] * len(row.get("scores") or [])
    scores = [s for s, v in zip(row.get("scores") or [], verdicts) if v != "error" and s is not None]
    return "zero_variance" if scores and len(set(map(float, scores))) == 1 else None


class TaskFilterConfig(StageConfig):
    """Built-in rules (each off unless set) and custom filters, applied in this order."""

    min_chars: int | None = Field(None, ge=0, description="Reject questions shorter than this.")
    max_chars: int | None = Field(None, ge=1, description="Reject questions longer than this.")
    require_verifier: bool = Field(False, description="Reject tasks whose verifier kind is none.")
    difficulties: list[Difficulty] | None = Field(None, description="Keep only these pass@k difficulties.")
    zero_variance: bool = Field(False, description="Reject tasks whose samples all pass or all fail.")
    model: str | None = Field(None, description="Only this model's samples feed zero_variance / scores (default: all).")
    custom: list[str] = Field(
        default_factory=list,
        description="Dotted paths pkg.mod:fn, fn(row: dict) -> str | None (None keeps, a string is the reason).",
    )

    @model_validator(mode="after")
    def _chars(self) -> TaskFilterConfig:
        if None not in (self.min_chars, self.max_chars) and self.min_chars > self.max_chars:
            raise ValueError(f"min_chars ({self.min_chars}) is above max_chars ({self.max_chars}): every task would go")
        return self


def build_filters(cfg: TaskFilterConfig) -> list[tuple[str, RowFilter]]:
    """The configured filters as (name, function), built-ins first."""
    out: list[tuple[str, RowFilter]] = []
    if cfg.min_chars is not None:
        out.append(("min_chars", min_chars(cfg.min_chars)))
    if cfg.max_chars is not None:
        out.append(("max_chars", max_chars(cfg.max_chars)))
    if cfg.require_verifier:
        out.append(("require_verifier", has_verifier))
    if cfg.difficulties is not None:
        out.append(("difficulties", difficulty_in(list(cfg.difficulties))))
    if cfg.zero_variance:
        out.append(("zero_variance", zero_variance))
    return out + load_filters(cfg.custom)


def _sample_groups(ctx: StageContext, model: str | None) -> dict[str, dict[str, list]]:
    data = ctx.store.read("samples", ["task_id", "model", "score", "verdict"])
    groups: dict[str, dict[str, list]] = defaultdict(lambda: {"scores": [], "verdicts": []})
    for tid, m, score, verdict in zip(*(data[c].to_pylist() for c in ("task_id", "model", "score", "verdict"))):
        if model is None or m == model:
            groups[tid]["scores"].append(score)
            groups[tid]["verdicts"].append(verdict)
    return groups


def run_filter(ctx: StageContext, cfg: TaskFilterConfig) -> dict[str, Any]:
    filters = build_filters(cfg)
    if not filters:
        raise UserError("no filter configured: set a rule (e.g. --zero-variance) or --custom pkg.mod:fn")
    tasks = sorted(active_tasks(ctx.store, ctx.name), key=lambda r: r["task_id"])
    passk = annotations(ctx.store, "passk", ["difficulty", "pass_at_1"])
    groups = _sample_groups(ctx, cfg.model)
    mine = [t for t in tasks if ctx.mine(t["task_id"])]
    kept = 0
    with ctx.progress(len(mine), "tasks") as advance:
        for task in mine:
            tid = task["task_id"]
            advance()
            row = {
                **task,
                "difficulty": None,
                "pass_at_1": None,
                **{k: v for k, v in passk.get(tid, {}).items() if k != "task_id"},
            }
            row.update(groups.get(tid, {"scores": [], "verdicts": []}))
            for name, fn in filters:
                reason = apply_filter(name, fn, row, "task", tid)
                if reason is not None:
                    ctx.reject("tasks", tid, reason, name)  # once per (task, reason), across resumes
                    break
            else:
                kept += 1
    return {"tasks": len(tasks), "kept": kept}


FILTER = StageSpec(
    "curate.filter",
    TaskFilterConfig,
    run_filter,
    inputs=("tasks", "passk", "samples"),
    outputs=("rejected",),
    help="Reject tasks by rules (length, verifier, difficulty, zero variance) and custom filters pkg.mod:fn(row) -> str | None; reasons counted in `rejected`.",
)
