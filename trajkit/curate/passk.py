"""``curate.passk``: sample k completions per task, verify each, tag difficulty.

Each task gets ``k`` attempts through ``envs.solve.solve`` (tool tasks run the
agent loop in a ``ToolEnv`` built from the run's ``servers`` table, with their
trajectories written to ``trajectories``; other tasks are one chat
completion), each judged by the task's verifier in the sandbox (``sandbox:``
local or e2b). ``sample_id = content_id(task_id, model, index, seed, stage)``, where
the seed (``envs.agent.episode_seed``) derives from the base seed, the task
and the index (not the model: models draw the same random numbers), so a rerun
asks for the same samples.

A killed run resumes per sample: an attempt's trajectory is written before
its sample, and both tables are flushed together between attempts (every
``flush_rows`` rows), so a kill loses at most the attempts since the last
flush, never a sample whose trajectory is missing; a trajectory already
written (by a run killed before its sample was) is not written again. Transient failures (a model request or a
server that failed or timed out: ``transient`` in the sample's details) are
samples with verdict ``error`` and the reason; the next run of the stage (a
resume) drops this rank's samples of those, with their trajectories, and
tries again, as every stage retries its transient failures. Other faults
(a tool that crashes on this input) stay ``error`` samples, left out of
pass@k. When every sample exists, the passk rows are computed over all
samples of each task.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field, field_validator

from trajkit.config import Unhashed
from trajkit.curate.pool import active_tasks
from trajkit.curate.samples import Thresholds, positive_ks, thresholds_field, write_passk
from trajkit.envs.options import EpisodeOptions
from trajkit.envs.solve import sample_row
from trajkit.models.base import ModelSpec
from trajkit.runner import StageContext, StageSpec
from trajkit.schema import content_id
from trajkit.verify.backends import SANDBOX_HELP, SandboxKind


class PassKConfig(EpisodeOptions):
    model: ModelSpec = Field(description="The model sampled: local directory, Hub id or served name, and its backend.")
    k: int = Field(16, ge=1, description="Samples per task.")
    ks: list[int] | None = Field(None, description="k values of pass@k (default: powers of 2 up to k, and k).")
    thresholds: Thresholds | None = thresholds_field
    seed: int = Field(0, description="Base seed; each sample's seed derives from it, the task and the index.")
    system_prompt: str | None = Field(None, description="System message of every attempt.")
    sources: list[str] | None = Field(None, description="Only tasks from these sources.")
    limit: int | None = Field(None, ge=1, description="Only the first N tasks (in task id order).")
    rollout: str | None = Field(None, description="Custom rollout function pkg.mod:fn for tool tasks (see envs.agent).")
    sandbox: Unhashed[SandboxKind] = Field("local", description=SANDBOX_HELP)
    concurrency: Unhashed[int] = Field(16, ge=1, description="Attempts in flight.")
    workers: Unhashed[int | None] = Field(None, ge=1, description="Sandbox workers (default: CPUs).")
    flush_rows: Unhashed[int] = Field(64, ge=1, description="Samples and trajectories per written shard.")

    @field_validator("ks")
    @classmethod
    def _valid_ks(cls, ks: list[int] | None) -> list[int] | None:
        return positive_ks(ks)

    @field_validator("thresholds")
    @classmethod
    def _valid_thresholds(cls, value: dict | None) -> dict | None:
        from trajkit.verify import difficulty

        difficulty(0.5, value)
        return value


def _tasks(ctx: StageContext, cfg: PassKConfig) -> list[dict[str, Any]]:
    """The tasks to sample: not rejected, from the chosen sources, with a verifier."""
    tasks = sorted(active_tasks(ctx.store, ctx.name), key=lambda t: t["task_id"])
    if cfg.sources is not None:
        tasks = [t for t in tasks if t["source"] in cfg.sources]
    out = []
    for t in tasks:
        if (t["verifier"] or {}).get("kind") in (None, "", "none"):
            ctx.counts["skipped.no_verifier"] += 1
        else:
            out.append(t)
    return out[: cfg.limit] if cfg.limit else out


def retry_transient(ctx: StageContext, _: PassKConfig) -> int:
    """Drop this rank's samples whose attempt failed transiently, and their trajectories, so they run again.

    A trajectory no sample refers to (a kill between the two flushes) stays to be
    reused by its rerun attempt, unless it failed transiently itself.
    """
    from trajkit.envs.agent import is_transient

    data = ctx.store.read("samples", ["sample_id", "task_id", "traj_id", "verdict", "details"], stage=ctx.name)
    samples, trajs, referenced = set(), set(), set()
    for row in data.to_pylist():
        referenced.add(row["traj_id"])
        transient = row["verdict"] == "error" and json.loads(row["details"] or "{}").get("transient")
        if transient and ctx.mine(row["task_id"]):
            samples.add(row["sample_id"])
            if row["traj_id"]:
                trajs.add(row["traj_id"])
    columns = ["traj_id", "task_id", "status", "reason_code"]
    for t in ctx.store.read("trajectories", columns, stage=ctx.name).to_pylist():
        failed = t["status"] == "aborted" or (t["status"] == "failed" and is_transient(t["reason_code"]))
        if t["traj_id"] not in referenced and failed and ctx.mine(t["task_id"]):
            trajs.add(t["traj_id"])
    ctx.store.drop_rows("trajectories", ctx.name, trajs)  # first: a kill here leaves samples the next run drops
    ctx.store.drop_rows("samples", ctx.name, samples)
    return len(samples)


async def run_passk(ctx: StageContext, cfg: PassKConfig) -> dict[str, Any]:
    from trajkit.envs.agent import episode_seed
    from trajkit.verify import check_custom_verifiers

    tasks = _tasks(ctx, cfg)
    check_custom_verifiers(t["verifier"] for t in tasks)
    attempts = []
    for task in tasks:
        for index in range(cfg.k):
            seed = episode_seed(cfg.seed, task["task_id"], index)
            attempts.append((content_id(task["task_id"], cfg.model.model, index, seed, ctx.name), task, index, seed))
    work = ctx.todo(attempts, "samples", key=lambda a: a[0], shard=lambda a: a[1]["task_id"])
    if work:
        await _sample_all(ctx, cfg, work)
    ctx.flush()
    histogram = write_passk(ctx, cfg.model.model, cfg.ks or None, cfg.thresholds)
    return {"tasks": len(tasks), "k": cfg.k, "difficulty": histogram}


async def _sample_all(ctx: StageContext, cfg: PassKConfig, work: list[tuple[str, dict, int, int]]) -> None:
    """Run every attempt with ``concurrency`` in flight; write each (trajectory, then sample) as it is judged."""
    from trajkit.envs.solve import Solver

    written = ctx.done("trajectories")
    tasks = [task for _, task, _, _ in work]
    solver = Solver.for_stage(
        ctx,
        cfg,
        [cfg.model],
        tasks,
        system_prompt=cfg.system_prompt,
        sandbox=cfg.sandbox,
        workers=cfg.workers,
        rollout=cfg.rollout,
    )

    async def one(item: tuple[str, dict, int, int]) -> Any:
        _, task, index, _ = item
        solved = await solver.solve(task, cfg.model.model, index)
        ctx.usage.check()  # a budget reached during the attempt stops the stage before its sample is written
        return solved

    async with solver:
        await ctx.fan_out(
            work,
            one,
            concurrency=cfg.concurrency,
            unit="samples",
            write=lambda item, solved: _write(ctx, cfg, item, solved, written),
            flush=(cfg.flush_rows, ("trajectories", "samples")),
        )


def _write(ctx: StageContext, cfg: PassKConfig, item: tuple, solved: Any, written: set[str]) -> int:
    """Write one attempt: its trajectory (unless a killed run already wrote it), then its sample; rows written."""
    sid, task, index, _ = item
    traj = solved.attempt.trajectory
    n = 1
    if traj is not None and traj["traj_id"] not in written:
        ctx.write("trajectories", {**traj, "verdict": solved.result.verdict})
        written.add(traj["traj_id"])
        n += 1
    a = solved.attempt
    traj_id = traj and traj["traj_id"]
    row = sample_row(sid, task["task_id"], index, cfg.model.model, a.completion, solved.result, traj_id, a.reason_code)
    ctx.write("samples", row)
    return n


PASSK = StageSpec(
    "curate.passk",
    PassKConfig,
    run_passk,
    retry=retry_transient,
    inputs=("tasks", "servers"),
    outputs=("samples", "trajectories", "passk"),
    help="Sample k completions per task (tool tasks through the agent loop), verify each in the sandbox, and tag pass@k difficulty.",
)
