"""`synth.filter`: rule filters and judge-score thresholds over trajectories; reasons counted, rows kept.

Rules (``rules.py``): no tool call, all tool results errors, empty final
answer, degenerate repetition; a trajectory whose status is not ``completed``
is rejected as ``status_<status>``, one whose task verifier did not pass it
(its ``verdict`` column) as ``verdict_<verdict>``, one of a ``multi_tool`` or
``multi_server`` task that did not call every target tool with a result that is
not an error as ``target_tool_not_called`` (an answer a verifier accepts is not
the multi-tool use the task is for). Thresholds on the judge's scores
(``trajectory_quality``, and the task's ``task_quality``; defaults from
``accepted.DEFAULT``) apply where a score exists; a null score fails a threshold only with ``require_scores``.
A judge answer that could not be read (``judge_reason_code`` ``judge_unreadable``: no verdict carrying the
call's nonce, say, as when judged text talked the judge out of its format) is not "unjudged": the
trajectory is rejected as ``judge_unreadable`` where a threshold reads that judgment, unless
``unreadable_judgments`` is ``keep``. Custom
filters are dotted paths to ``fn(trajectory: dict) -> str | None`` (a reason
to reject, or None); one that raises, or returns anything else, is a bug in
user code: a UserError naming the filter and the trajectory (exit 2), as in
``curate.filter``. Every failing check writes a ``rejected`` row; nothing is
deleted.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal

from pydantic import Field, field_validator

from trajkit.accepted import DEFAULT
from trajkit.config import StageConfig, Unhashed
from trajkit.plugins import RowFilter, apply_filter, load_filters
from trajkit.runner import StageContext, StageSpec
from trajkit.synth import rules

MULTI_TOOL_MODES = ("multi_tool", "multi_server")  # tasks whose trajectories must call every target tool
THRESHOLDS = {
    "min_completeness": ("trajectory_quality", "completeness"),
    "min_conciseness": ("trajectory_quality", "conciseness"),
    "min_tool_accuracy": ("trajectory_quality", "tool_accuracy"),
    "min_task_quality": ("task_quality", "quality_score"),
}


class TrajectoryFilterConfig(StageConfig):
    """Config of ``synth.filter``."""

    rules: list[str] = Field(default_factory=lambda: list(rules.RULES), description="Rule filters to apply.")
    reject_unfinished: bool = Field(True, description="Reject trajectories whose status is not completed.")
    reject_failed_verdicts: bool = Field(
        True, description="Reject trajectories whose task verifier's verdict is not pass (null: no verifier)."
    )
    require_target_tools: bool = Field(
        True,
        description="Reject a multi_tool or multi_server task's trajectory unless every target tool was called "
        "with a result that is not an error (target_tool_not_called).",
    )
    min_completeness: float | None = Field(
        DEFAULT.min_completeness, ge=1, le=5, description="Judge's completeness (1-5) at least this."
    )
    min_conciseness: float | None = Field(None, ge=1, le=5, description="Judge's conciseness (1-5) at least this.")
    min_tool_accuracy: float | None = Field(None, ge=0, le=1, description="Share of target tools used.")
    min_task_quality: float | None = Field(
        DEFAULT.min_task_quality, ge=1, le=5, description="The task's mean judge score (1-5) at least this."
    )
    require_scores: bool = Field(False, description="A missing or unparsed score fails a threshold.")
    unreadable_judgments: Literal["reject", "keep"] = Field(
        "reject",
        description="A judge answer that could not be read (judge_reason_code judge_unreadable), where a threshold "
        "reads it: reject the trajectory (reason judge_unreadable), or keep it as unjudged.",
    )
    custom: list[str] = Field(
        default_factory=list, description="Dotted paths to fn(trajectory: dict) -> str | None (a reject reason)."
    )
    flush_rows: Unhashed[int] = Field(1024, ge=1, description="Rows per written shard.")

    @field_validator("rules")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        unknown = [r for r in value if r not in rules.RULES]
        if unknown:
            raise ValueError(f"unknown rule(s) {', '.join(unknown)}; known: {', '.join(rules.RULES)}")
        return value


def run_filter(ctx: StageContext, cfg: TrajectoryFilterConfig) -> dict[str, Any]:
    custom = load_filters(cfg.custom)
    scores = _scores(ctx, cfg)
    targets = _multi_tool_targets(ctx) if cfg.require_target_tools else {}
    ctx.writer("rejected", rows_per_shard=cfg.flush_rows)
    trajs = sorted(ctx.store.rows("trajectories"), key=lambda r: r["traj_id"])
    mine = [r for r in trajs if ctx.mine(r["traj_id"])]
    kept, total, why = 0, 0, Counter()
    with ctx.progress(len(mine), "trajectories") as advance:
        for row in mine:
            advance(1)
            reasons = check(row, cfg, scores, custom, targets.get(row["task_id"]))
            for reason, detail in reasons:
                ctx.reject("trajectories", row["traj_id"], reason, detail)
            kept += not reasons
            total += 1
            why.update(reason for reason, _ in reasons)
    ctx.counts["kept"] = kept
    ctx.log(f"kept {kept} of {total}" + "".join(f"; {r} {n}" for r, n in sorted(why.items())))
    return {"kept": kept, "of": total, "reasons": dict(sorted(why.items()))}


def check(
    row: dict[str, Any],
    cfg: TrajectoryFilterConfig,
    scores: dict[str, dict[str, dict[str, Any]]],
    custom: list[tuple[str, RowFilter]] = (),
    targets: list[str] | None = None,
) -> list[tuple[str, str | None]]:
    """Every (reason, detail) for which a trajectory is rejected; empty when it is kept. ``targets``: the target
    tools its task requires called (a multi_tool or multi_server task's)."""
    out: list[tuple[str, str | None]] = []
    if cfg.reject_unfinished and row["status"] != "completed":
        out.append((f"status_{row['status']}", row.get("reason")))
    out += [(reason, None) for reason in rules.check(row, cfg.rules)]
    if uncalled := rules.uncalled_targets(row, targets or []):
        out.append(("target_tool_not_called", ", ".join(uncalled)[:200]))
    if cfg.reject_failed_verdicts and row.get("verdict") not in (None, "pass"):
        out.append((f"verdict_{row['verdict']}", row.get("reason")))
    for table in sorted(scores) if cfg.unreadable_judgments == "reject" else ():
        judged = scores[table].get(row["task_id"] if table == "task_quality" else row["traj_id"], {})
        if judged.get("judge_reason_code") == "judge_unreadable":
            out.append(("judge_unreadable", f"{table}: {judged.get('judge_reason')}"))
    for option, (table, column) in THRESHOLDS.items():
        minimum = getattr(cfg, option)
        if minimum is None:
            continue
        key = row["task_id"] if table == "task_quality" else row["traj_id"]
        value = scores.get(table, {}).get(key, {}).get(column)
        if value is None:
            if cfg.require_scores:
                out.append((f"missing_{column}", None))
        elif value < minimum:
            out.append((f"low_{column}", f"{value:g} < {minimum:g}"))
    for path, fn in custom:
        if reason := apply_filter(path, fn, row, "trajectory", row["traj_id"]):
            out.append((reason, path))
    return out


def _multi_tool_targets(ctx: StageContext) -> dict[str, list[str]]:
    """The target tools of every multi_tool and multi_server task, by task id."""
    rows = ctx.store.rows("tasks", ["task_id", "mode", "target_tools"])
    return {t["task_id"]: t["target_tools"] for t in rows if t["mode"] in MULTI_TOOL_MODES and t["target_tools"]}


def _scores(ctx: StageContext, cfg: TrajectoryFilterConfig) -> dict[str, dict[str, dict[str, Any]]]:
    needed = {table for option, (table, _) in THRESHOLDS.items() if getattr(cfg, option) is not None}
    out = {}
    for table in needed:
        key = "task_id" if table == "task_quality" else "traj_id"
        out[table] = {r[key]: r for r in ctx.store.rows(table)}
    return out


FILTER = StageSpec(
    "synth.filter",
    TrajectoryFilterConfig,
    run_filter,
    inputs=("trajectories", "tasks", "trajectory_quality", "task_quality"),
    outputs=("rejected",),
    help="Reject trajectories by rules (no tool call, tool errors, empty answer, repetition, a multi-tool task's target tool not called) and judge thresholds; reasons counted, rows kept.",
)
