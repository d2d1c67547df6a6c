"""`synth.rollouts`: the agent loop over tasks, with bounded concurrency and over-sampling.

Every (task, rollout index) is one episode of ``envs.agent.run_episode`` (or a
custom rollout function) against the run's harvested servers, and one
``trajectories`` row whatever happens (a fault is a status, a reason and a
reason code). Each row's ``verdict`` is its task verifier's outcome
(``envs.solve.trajectory_verdict``: the final answer and end state judged as
``curate.passk`` judges them; null for a task without a verifier).
Episodes run in breadth-first order: rollout 0 of every task, then rollout 1.

With ``target`` N, the stage keeps ``concurrency`` episodes in flight until N
are accepted (completed and passing the ``accept_rules``), then cancels the
rest and records them as ``aborted`` ("target reached"). A resumed stage that
has not reached its target re-runs its aborted rows; one that has is done.
With ``--world-size``, each rank owns a hash share of the (task, rollout index)
pairs and aims for its share of the target. An episode that failed
transiently (a model request that failed, a server that timed out or could not
be reached: ``envs.agent.is_transient``) is a ``failed`` row with its reason, and the next
run of the stage (a resume) drops this rank's rows of those and runs them
again, as every stage retries its transient failures; other faults stay. When
every episode of a run failed for want of a connection to an HTTP server, the
stage ends with one line naming the URL (exit 2, ``envs.agent.none_reached``).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from trajkit import schema as S
from trajkit.envs.agent import episode_head, episode_seed, none_reached, staged_episode
from trajkit.envs.options import ServerPoolOptions
from trajkit.errors import UserError
from trajkit.models.base import ModelSpec, SamplingParams
from trajkit.runner import StageContext, StageSpec
from trajkit.store import sql_condition
from trajkit.synth import rules

ABORTED_REASON = "target reached"


class RolloutsConfig(ServerPoolOptions):
    """Config of ``synth.rollouts``."""

    model: ModelSpec = Field(description="The agent model.")
    rollouts_per_task: int = Field(1, ge=1, description="Episodes per task (rollout indices 0..n-1).")
    target: int | None = Field(None, ge=1, description="Stop once this many trajectories are accepted.")
    accept_rules: list[str] = Field(
        default_factory=lambda: list(rules.RULES), description="Rule filters an accepted trajectory passes."
    )
    where: str | None = Field(None, description='SQL condition on the tasks view, e.g. "quality_score >= 3".')
    include_rejected_tasks: bool = Field(False, description="Also roll out tasks some stage rejected.")
    system_prompt: str | None = Field(None, description="System message of every episode.")
    rollout_fn: str | None = Field(
        None,
        description="Dotted path to `async def rollout(task, backend, env, params, limits, **kw) -> dict` "
        "(a trajectories row); default: envs.agent.run_episode.",
    )
    policy_version: int | None = Field(None, description="Stored on every row (for off-policy corrections).")

    @field_validator("accept_rules")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        unknown = [r for r in value if r not in rules.RULES]
        if unknown:
            raise ValueError(f"unknown rule(s) {', '.join(unknown)}; known: {', '.join(rules.RULES)}")
        return value


def accepted(row: dict[str, Any], accept_rules: list[str]) -> bool:
    """A trajectory counts toward the target: completed, not failed by its task's verifier, passing the rules."""
    return row["status"] == "completed" and row.get("verdict") in (None, "pass") and not rules.check(row, accept_rules)


def select_tasks(ctx: StageContext, where: str | None, include_rejected: bool) -> list[dict[str, Any]]:
    """Tasks with a question, not rejected (unless asked), matching ``where``; sorted by id."""
    tasks = [t for t in ctx.store.rows("tasks") if t["question"]]
    if not include_rejected:
        rejected = ctx.store.rejected("tasks")
        tasks = [t for t in tasks if t["task_id"] not in rejected]
    if where:
        ids = set(
            ctx.store.sql(f"SELECT task_id FROM tasks WHERE {sql_condition(where, 'where')}").column(0).to_pylist()
        )
        tasks = [t for t in tasks if t["task_id"] in ids]
    return sorted(tasks, key=lambda t: t["task_id"])


async def run_rollouts(ctx: StageContext, cfg: RolloutsConfig) -> dict[str, Any]:
    from trajkit.envs.agent import load_rollout
    from trajkit.verify import check_custom_verifiers

    rollout = load_rollout(cfg.rollout_fn)
    servers = ctx.store.rows("servers")
    if not servers:
        raise UserError(f"no servers in {ctx.store.root}: run `trajkit synth harvest` first")
    tasks = select_tasks(ctx, cfg.where, cfg.include_rejected_tasks)
    check_custom_verifiers(t["verifier"] for t in tasks)  # rows get verdicts: a verifier that won't import stops now
    goal = _share(cfg.target, ctx.rank, ctx.world_size) if cfg.target is not None else None
    mine = [r for r in ctx.store.rows("trajectories", stage=ctx.name) if r["parent_id"] is None]
    have = sum(accepted(r, cfg.accept_rules) for r in mine if _owned(ctx, r))
    if goal is not None and have < goal:
        # episodes cancelled once the target was met, by a run that was then killed: not failures, the
        # over-sampling's own work left to do (only this rank's rows: another rank's are its own)
        again = [r for r in mine if r["status"] == "aborted" and _owned(ctx, r)]
        retried = {r["traj_id"] for r in again}
        ctx.store.drop_rows("trajectories", ctx.name, retried)
        ctx.counts["resumed.retried_aborted"] += len(retried)
        mine = [r for r in mine if r["traj_id"] not in retried]
    else:
        again = []
    episodes = [(t, i) for i in range(cfg.rollouts_per_task) for t in tasks]
    done = {(r["task_id"], r["rollout_index"]) for r in mine}
    todo = ctx.todo(
        episodes, done, key=lambda e: (e[0]["task_id"], e[1]), shard=lambda e: S.content_id(e[0]["task_id"], e[1])
    )
    if goal is not None and have >= goal:
        todo = []
    ctx.log(f"{len(todo)} episodes to run over {len(tasks)} tasks" + (f", target {goal} ({have} in)" if goal else ""))
    retry = {(r["task_id"], r["rollout_index"]) for r in again}
    await _run(ctx, cfg, rollout, servers, todo, goal, have, retry)
    return {"tasks": len(tasks), "target": cfg.target}


def retry_transient(ctx: StageContext, _: RolloutsConfig) -> int:
    """Drop this rank's first-turn trajectories that failed transiently, so they run again."""
    from trajkit.envs.agent import is_transient

    mine = ctx.store.rows(
        "trajectories", ["traj_id", "task_id", "rollout_index", "parent_id", "status", "reason_code"], stage=ctx.name
    )
    failed = {
        r["traj_id"]
        for r in mine
        if r["parent_id"] is None and r["status"] == "failed" and is_transient(r["reason_code"]) and _owned(ctx, r)
    }
    return ctx.store.drop_rows("trajectories", ctx.name, failed)


def _share(target: int, rank: int, world_size: int) -> int:
    """This rank's part of the target: the target split as evenly as possible."""
    return target // world_size + (rank < target % world_size)


def _owned(ctx: StageContext, row: dict[str, Any]) -> bool:
    return ctx.mine(S.content_id(row["task_id"], row["rollout_index"]))


async def _run(
    ctx: StageContext,
    cfg: RolloutsConfig,
    rollout: Any,
    servers: list[dict[str, Any]],
    todo: list[tuple[dict[str, Any], int]],
    goal: int | None,
    have: int,
    retry: set[tuple[str, int]],
) -> None:
    """Run the episodes; ``retry`` are aborted ones being run again: those the target leaves
    unstarted are recorded as aborted again, so no aborted row is lost."""
    from trajkit.envs.solve import trajectory_verdict
    from trajkit.verify.backends import sandbox_for

    backend = ctx.backend(cfg.model)
    params, limits = cfg.sampling(), cfg.limits()
    ctx.writer("trajectories", rows_per_shard=cfg.flush_rows)
    env = cfg.tool_env(servers, ctx.share)

    def aborted(task_id: str, i: int) -> dict[str, Any]:
        return aborted_row(task_id, i, backend, params, episode_seed(cfg.seed, task_id, i), ctx.name)

    async def episode(item: tuple[dict[str, Any], int]) -> dict[str, Any]:
        """One episode's row, with its task verifier's verdict."""
        task, i = item
        row = await staged_episode(
            rollout,
            ctx.name,
            task,
            backend,
            env,
            params,
            limits,
            system_prompt=cfg.system_prompt,
            rollout_index=i,
            seed=episode_seed(cfg.seed, task["task_id"], i),
            policy_version=cfg.policy_version,
        )
        return {**row, "verdict": await trajectory_verdict(task, row, sandbox)}

    ran: list[dict[str, Any]] = []

    def write(_: Any, row: dict[str, Any]) -> None:
        nonlocal have
        _check_budget(ctx, row)
        ctx.write("trajectories", row)
        ran.append({"reason": row["reason"], "reason_code": row["reason_code"]})
        have += accepted(row, cfg.accept_rules)

    def reached() -> bool:
        return goal is not None and have >= goal

    kinds = {(t["verifier"] or {}).get("kind") for t, _ in todo}
    try:
        with sandbox_for(kinds, share=ctx.share) as sandbox:
            async with env:
                cancelled, unstarted = await ctx.fan_out(
                    todo, episode, concurrency=cfg.concurrency, unit="episodes", write=write, until=reached
                )
        for task, i in cancelled + [(t, i) for t, i in unstarted if (t["task_id"], i) in retry]:
            ctx.write("trajectories", aborted(task["task_id"], i))
        if none_reached([r["reason_code"] for r in ran]):
            raise UserError(
                f"all {len(ran)} episodes failed: {ran[0]['reason']}; start the server or correct its url, then "
                "rerun (they run again)"
            )
    finally:
        await backend.aclose()


def _check_budget(ctx: StageContext, row: dict[str, Any]) -> None:
    """Stop (without writing it) when an episode failed because the budget ran out: it must run again."""
    if row["status"] == "failed":
        ctx.usage.check()


def aborted_row(
    task_id: str, rollout_index: int, backend: Any, params: SamplingParams, seed: int, stage: str
) -> dict[str, Any]:
    """The row of an episode cancelled because the target was reached; its id is the one it would have had."""
    return {
        **episode_head(task_id, rollout_index, backend, params, seed, None, stage),
        "status": "aborted",
        "reason": ABORTED_REASON,
        "reason_code": "target_reached",
    }


ROLLOUTS = StageSpec(
    "synth.rollouts",
    RolloutsConfig,
    run_rollouts,
    retry=retry_transient,
    inputs=("tasks", "servers"),
    outputs=("trajectories",),
    help="Run the agent loop over tasks against the harvested MCP servers into `trajectories`; --target N over-samples and cancels the rest once N are accepted.",
)
