"""``curate.passk``: sample k completions per task, verify each, tag difficulty.

Each task gets ``k`` attempts through ``envs.solve.attempt`` (tool tasks run
the agent loop in a ``ToolEnv`` built from the run's ``servers`` table, with
their trajectories written to ``trajectories``; other tasks are one chat
completion). Each attempt is verified by the task's verifier in the sandbox
and written to ``samples`` as soon as it is judged, so a killed run resumes
per sample: ``sample_id = content_id(task_id, model, index, seed)``, where the
seed derives from the task, model, index and the configured base seed, so a
rerun asks for the same samples. Attempts that failed for infrastructure
reasons (a model request or server failure, verdict ``error``) are retried on
the next run. When every sample exists, the passk rows are computed over all
samples of each task.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import Field, field_validator

from trajkit.config import StageConfig
from trajkit.curate.pool import active_tasks
from trajkit.curate.samples import Thresholds, sample_row, thresholds_field, write_passk
from trajkit.models.base import ModelSpec
from trajkit.runner import StageContext, StageSpec
from trajkit.schema import content_id

ATTEMPT_ERROR = "attempt_error"  # details key of samples whose attempt failed before any verification


class PassKConfig(StageConfig):
    model: ModelSpec = Field(description="The model sampled: local directory, Hub id or served name, and its backend.")
    k: int = Field(16, ge=1, description="Samples per task.")
    ks: list[int] | None = Field(None, description="k values of pass@k (default: powers of 2 up to k, and k).")
    thresholds: Thresholds | None = thresholds_field
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(1024, ge=1)
    seed: int = Field(
        0, description="Base seed; each sample's seed derives from it, the task, the model and the index."
    )
    system_prompt: str | None = Field(None, description="System message of every attempt.")
    sources: list[str] | None = Field(None, description="Only tasks from these sources.")
    limit: int | None = Field(None, ge=1, description="Only the first N tasks (in task id order).")
    max_turns: int = Field(8, ge=1, description="Tool tasks: model calls per episode.")
    max_context_tokens: int | None = Field(None, ge=1, description="Tool tasks: stop an episode past this context.")
    tool_timeout_s: float = Field(30.0, gt=0, description="Tool tasks: seconds per tool call.")
    max_tool_output_chars: int = Field(4000, ge=1, description="Tool tasks: tool output shown to the model.")
    servers_config: str | None = Field(None, description="mcpServers JSON (env values, cwd) for the run's servers.")
    rollout: str | None = Field(None, description="Custom rollout function pkg.mod:fn for tool tasks (see envs.agent).")
    concurrency: int = Field(16, ge=1, json_schema_extra={"hash": False}, description="Attempts in flight.")
    workers: int | None = Field(
        None, ge=1, json_schema_extra={"hash": False}, description="Sandbox workers (default: CPUs)."
    )

    @field_validator("thresholds")
    @classmethod
    def _valid_thresholds(cls, value: dict | None) -> dict | None:
        from trajkit.verify import difficulty

        difficulty(0.5, value)
        return value


def sample_seed(task_id: str, model: str, index: int, base: int) -> int:
    """The sampling seed of one attempt: fixed by what defines the sample."""
    return int(content_id(task_id, model, index, base), 16) % 2**31


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


def _retry_failed_attempts(ctx: StageContext) -> int:
    """Drop this stage's samples (and their trajectories) whose attempt failed, so they run again."""
    data = ctx.store.read("samples", ["sample_id", "traj_id", "verdict", "details"], stage=ctx.name)
    samples, trajs = set(), set()
    for sid, tid, verdict, details in zip(
        *(data[c].to_pylist() for c in ("sample_id", "traj_id", "verdict", "details"))
    ):
        if verdict == "error" and ATTEMPT_ERROR in json.loads(details or "{}"):
            samples.add(sid)
            if tid:
                trajs.add(tid)
    ctx.store.drop_rows("samples", ctx.name, samples)
    ctx.store.drop_rows("trajectories", ctx.name, trajs)
    return len(samples)


def run_passk(ctx: StageContext, cfg: PassKConfig) -> dict[str, Any]:
    retried = _retry_failed_attempts(ctx)
    if retried:
        ctx.log(f"retrying {retried} attempts that failed before verification")
    tasks = _tasks(ctx, cfg)
    done = ctx.done("samples")
    work = []
    for task in tasks:
        if not ctx.mine(task["task_id"]):
            continue
        for index in range(cfg.k):
            seed = sample_seed(task["task_id"], cfg.model.model, index, cfg.seed)
            sid = content_id(task["task_id"], cfg.model.model, index, seed)
            if sid not in done:
                work.append((sid, task, index, seed))
    if work:
        asyncio.run(_sample_all(ctx, cfg, work))
    ctx.flush()
    histogram = write_passk(ctx, cfg.model.model, cfg.ks or None, cfg.thresholds)
    return {"tasks": len(tasks), "k": cfg.k, "retried": retried, "difficulty": histogram}


async def _sample_all(ctx: StageContext, cfg: PassKConfig, work: list[tuple[str, dict, int, int]]) -> None:
    """Run every attempt with ``concurrency`` in flight; verify and write each as it finishes."""
    from trajkit.envs.agent import AgentLimits, load_rollout
    from trajkit.envs.solve import is_tool_task
    from trajkit.models import SamplingParams, make_backend
    from trajkit.verify import Sandbox, default_sandbox

    backend = make_backend(cfg.model, usage=ctx.usage, cache_dir=ctx.store.root / "_cache")
    params = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens, seed=cfg.seed)
    limits = AgentLimits(cfg.max_turns, cfg.max_context_tokens, cfg.tool_timeout_s, cfg.max_tool_output_chars)
    rollout = load_rollout(cfg.rollout) if cfg.rollout else None
    sandbox = Sandbox(workers=cfg.workers).start() if cfg.workers else default_sandbox()
    env = None
    try:
        if any(is_tool_task(t) for _, t, _, _ in work):
            from trajkit.envs.agent import ToolEnv

            env = ToolEnv(ctx.store.rows("servers"), config=cfg.servers_config)
        queue: asyncio.Queue = asyncio.Queue()
        for item in work:
            queue.put_nowait(item)
        with ctx.progress(len(work), "samples") as advance:

            async def worker() -> None:
                while not queue.empty():
                    item = queue.get_nowait()
                    await _one(ctx, cfg, item, backend, env, params, limits, rollout, sandbox)
                    advance()

            await asyncio.gather(*(worker() for _ in range(min(cfg.concurrency, len(work)))))
    finally:
        if env is not None:
            await env.aclose()
        await backend.aclose()
        if cfg.workers:
            sandbox.close()


async def _one(ctx, cfg, item, backend, env, params, limits, rollout, sandbox) -> None:
    from trajkit.envs.solve import attempt
    from trajkit.verify import Result, verify

    sid, task, index, seed = item
    tried = await attempt(
        task,
        backend,
        env,
        params,
        limits,
        sample_index=index,
        seed=seed,
        system_prompt=cfg.system_prompt,
        rollout=rollout,
    )
    ctx.usage.check()  # a budget reached during the attempt stops the stage before its sample is written
    traj = tried.trajectory
    if tried.error is not None:
        result = Result.error(tried.error, **{ATTEMPT_ERROR: True})
        result.runtime_s = round(tried.seconds, 4)
    else:
        result = await asyncio.to_thread(verify, task["verifier"], tried.completion or "", tried.context, sandbox)
    if traj is not None:
        ctx.write("trajectories", traj)
    ctx.write(
        "samples",
        sample_row(sid, task["task_id"], index, cfg.model.model, tried.completion, result, traj and traj["traj_id"]),
    )
    ctx.counts[f"verdict.{result.verdict}"] += 1


PASSK = StageSpec(
    "curate.passk",
    PassKConfig,
    run_passk,
    inputs=("tasks", "servers"),
    outputs=("samples", "trajectories", "passk"),
    help="Sample k completions per task (tool tasks through the agent loop), verify them, write pass@k and difficulty.",
)
