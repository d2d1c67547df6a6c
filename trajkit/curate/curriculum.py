"""``curate.curriculum``: assign each training task to a curriculum stage.

Only train-split tasks with a pass@k difficulty take part; each gets one row.

* The **hard** stage takes the hard pool (``hard_difficulties``, default
  ``hard``), hardest first (lowest pass@1), at most ``hard_size`` of them, with
  ``hard_rollouts`` rollouts per prompt. ``hard_phases`` narrows it: with
  ``[200, 50]`` phase 0 is the whole stage, phase 1 its hardest 200 and phase 2
  its hardest 50; a task's ``phase`` is the last phase it belongs to, so phase
  ``p`` of training selects ``phase >= p``.
* The **broad** stage takes the remaining tasks of ``broad_difficulties``
  (default hard, medium, easy: no unsolved, no trivial), uniform across sources
  and difficulties: ``weight`` gives every difficulty its ``target`` share of
  the sampling mass (uniform by default) and, inside it, every source an equal
  share. With ``broad_size`` the stage is resampled to that many tasks: each
  difficulty gets ``round(broad_size * share)``, taken round-robin across
  sources in a seeded hash order.

A **short bucket** (fewer tasks than its quota) keeps all its tasks and their
weights rise so it still carries its target share: training samples them more
often, as sampling with replacement would. A bucket with **no** task cannot
carry mass: its share is spread over the other buckets, and it is counted as
``curriculum.empty.<difficulty>``. Weights average 1 within a stage.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from typing import Any, Literal

from pydantic import Field, model_validator

from trajkit import schema as S
from trajkit.config import StageConfig
from trajkit.curate.pool import active_tasks, annotations
from trajkit.errors import UserError
from trajkit.runner import StageContext, StageSpec

Difficulty = Literal[S.DIFFICULTIES]  # type: ignore[valid-type]


class CurriculumConfig(StageConfig):
    broad_name: str = Field("broad", description="Name of the broad stage.")
    hard_name: str = Field("hard", description="Name of the hard stage.")
    broad_difficulties: list[Difficulty] = Field(["hard", "medium", "easy"], min_length=1)
    broad_rollouts: int = Field(8, ge=1, description="Rollouts per prompt in the broad stage.")
    broad_size: int | None = Field(None, ge=1, description="Resample the broad stage to this many tasks.")
    target: dict[Difficulty, float] | None = Field(
        None, description="Target difficulty histogram of the broad stage (shares; default uniform)."
    )
    hard_difficulties: list[Difficulty] = Field(["hard"], description="The hard pool.")
    hard_rollouts: int = Field(16, ge=1, description="Rollouts per prompt in the hard stage.")
    hard_size: int | None = Field(None, ge=1, description="Keep only the hardest N of the hard pool in the hard stage.")
    hard_phases: list[int] = Field(
        default_factory=list, description="Narrowing phases: sizes of the hardest subsets, decreasing."
    )
    seed: str = Field("trajkit", description="Seed of the resampling order.")

    @model_validator(mode="after")
    def _check(self) -> CurriculumConfig:
        if self.broad_name == self.hard_name:
            raise ValueError("broad_name and hard_name must differ")
        if any(b >= a for a, b in zip(self.hard_phases, self.hard_phases[1:])) or any(p < 1 for p in self.hard_phases):
            raise ValueError("hard_phases must be positive and strictly decreasing, e.g. [200, 50]")
        if self.target is not None:
            extra = set(self.target) - set(self.broad_difficulties)
            if extra:
                raise ValueError(f"target has difficulties outside broad_difficulties: {', '.join(sorted(extra))}")
            if any(v < 0 for v in self.target.values()) or sum(self.target.values()) <= 0:
                raise ValueError("target shares must be non-negative and not all zero")
        return self

    def shares(self) -> dict[str, float]:
        raw = self.target or {d: 1.0 for d in self.broad_difficulties}
        total = sum(raw.values())
        return {d: raw.get(d, 0.0) / total for d in self.broad_difficulties}


def _order(seed: str, task_id: str) -> str:
    return hashlib.sha256(f"{seed}:{task_id}".encode()).hexdigest()


def _round_robin(tasks: list[dict[str, Any]], quota: int, seed: str) -> list[dict[str, Any]]:
    """Up to ``quota`` tasks, one source at a time, each source in seeded hash order."""
    by_source: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in sorted(tasks, key=lambda t: _order(seed, t["task_id"])):
        by_source[t["source"] or ""].append(t)
    queues = [by_source[s] for s in sorted(by_source)]
    out: list[dict[str, Any]] = []
    depth = 0
    while len(out) < quota and any(depth < len(q) for q in queues):
        out.extend(q[depth] for q in queues if depth < len(q))
        depth += 1
    return out[:quota]


def _weights(groups: dict[str, list[dict[str, Any]]], shares: dict[str, float]) -> dict[str, float]:
    """Weights giving each group its share (renormalized over non-empty groups) and each
    source in a group an equal part of it; they average 1."""
    live = {g: s for g, s in shares.items() if groups.get(g) and s > 0}
    total_share = sum(live.values())
    n = sum(len(groups[g]) for g in live)
    out = {}
    for g, share in live.items():
        per_source: dict[str, int] = defaultdict(int)
        for t in groups[g]:
            per_source[t["source"] or ""] += 1
        for t in groups[g]:
            src = t["source"] or ""
            out[t["task_id"]] = n * (share / total_share) / len(per_source) / per_source[src]
    return out


def plan(tasks: list[dict[str, Any]], cfg: CurriculumConfig) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Curriculum rows for train tasks (each with task_id, source, difficulty, pass_at_1)."""
    counts: dict[str, int] = defaultdict(int)
    pool = sorted(
        (t for t in tasks if t["difficulty"] in cfg.hard_difficulties),
        key=lambda t: (t["pass_at_1"] if t["pass_at_1"] is not None else 0.0, _order(cfg.seed, t["task_id"])),
    )
    hard = pool[: cfg.hard_size] if cfg.hard_size else pool
    taken = {t["task_id"] for t in hard}
    rows = []
    hard_w = _weights({"hard": hard}, {"hard": 1.0})
    for rank, t in enumerate(hard):
        phase = sum(1 for size in cfg.hard_phases if rank < size)
        rows.append(_row(t, cfg.hard_name, phase, cfg.hard_rollouts, hard_w[t["task_id"]]))
    shares = cfg.shares()
    buckets: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in tasks:
        if t["task_id"] not in taken and t["difficulty"] in shares:
            buckets[t["difficulty"]].append(t)
    if cfg.broad_size is not None:
        for d, share in shares.items():
            quota = round(cfg.broad_size * share)
            if len(buckets[d]) < quota:
                counts[f"curriculum.short.{d}"] += quota - len(buckets[d])
            chosen = _round_robin(buckets[d], quota, cfg.seed)
            counts["curriculum.resampled_out"] += len(buckets[d]) - len(chosen)
            buckets[d] = chosen
    for d, share in shares.items():
        if share > 0 and not buckets[d]:
            counts[f"curriculum.empty.{d}"] += 1
    broad_w = _weights(buckets, shares)
    for d in shares:
        for t in buckets[d]:
            if t["task_id"] in broad_w:
                rows.append(_row(t, cfg.broad_name, 0, cfg.broad_rollouts, broad_w[t["task_id"]]))
    counts[f"curriculum.{cfg.hard_name}"] = len(hard)
    counts[f"curriculum.{cfg.broad_name}"] = len(rows) - len(hard)
    return sorted(rows, key=lambda r: r["task_id"]), dict(counts)


def _row(task: dict[str, Any], stage: str, phase: int, rollouts: int, weight: float) -> dict[str, Any]:
    return {
        "task_id": task["task_id"],
        "stage": stage,
        "phase": phase,
        "rollouts_per_prompt": rollouts,
        "weight": weight,
    }


def run_curriculum(ctx: StageContext, cfg: CurriculumConfig) -> dict[str, Any]:
    splits = annotations(ctx.store, "splits", ["split"])
    if not splits:
        raise UserError("no splits in this run: run `trajkit curate split` before the curriculum")
    passk = annotations(ctx.store, "passk", ["difficulty", "pass_at_1"])
    tasks = []
    for t in active_tasks(ctx.store, ctx.name, ["source"]):
        tid = t["task_id"]
        if splits.get(tid, {}).get("split") != "train":
            continue
        if tid not in passk:
            ctx.counts["curriculum.no_difficulty"] += 1
            continue
        tasks.append({**t, "difficulty": passk[tid]["difficulty"], "pass_at_1": passk[tid]["pass_at_1"]})
    rows, counts = plan(tasks, cfg)
    ctx.counts.update(counts)
    todo = ctx.todo(rows, "curriculum", key="task_id")
    for start in range(0, len(todo), 5000):
        ctx.write("curriculum", todo[start : start + 5000])
    stages = {name: counts[f"curriculum.{name}"] for name in (cfg.broad_name, cfg.hard_name)}
    summary: dict[str, Any] = {"train_tasks": len(tasks), "stages": stages}
    if missing := ctx.counts["curriculum.no_difficulty"]:
        summary["note"] = (
            f"{missing} train task(s) have no difficulty and are left out (`trajkit curate passk` tags a task "
            "with a verifier)"
        )
        ctx.log(summary["note"])
    return summary


CURRICULUM = StageSpec(
    "curate.curriculum",
    CurriculumConfig,
    run_curriculum,
    inputs=("tasks", "splits", "passk"),
    outputs=("curriculum",),
    help="Assign train tasks to curriculum stages: broad (uniform over sources and difficulty) and hard (phased).",
)
