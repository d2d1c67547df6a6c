"""`synth.extend`: multi-turn extension. A user simulator writes a follow-up; the agent loop continues.

For each parent trajectory (completed, not rejected, matching ``where``), the
user-simulator model reads the conversation (``user_simulator.md``, in the call's
nonce-marked data blocks) and writes the next user message; ``run_episode``
continues from the parent's messages with it, and the new row's ``parent_id`` is
the parent's ``traj_id``. With ``rounds`` > 1, each round extends the previous
round's completed rows. A simulator that ends the conversation gives an
``aborted`` row; one that writes nothing or fails, a ``failed`` row with the
reason, so the attempt is recorded and not repeated — unless it failed
transiently (the simulator's or the agent's model request failed, a server timed
out): the next run of the stage (a resume) drops this rank's rows of those and
extends them again, as every stage retries its transient failures.

The follow-up has no outcome check of its own: the new row carries no
``end_state``. The continuation runs on fresh server instances that first
replay the earlier turns' calls to stateful stdio servers and compare each result
with the recorded one (the fields a server declares ``volatile`` aside); a
difference fails the extension as ``state_not_reproducible`` (``envs.agent``).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, model_validator

from trajkit import schema as S
from trajkit.config import merge
from trajkit.envs.agent import episode_head, staged_episode
from trajkit.envs.options import ServerPoolOptions
from trajkit.errors import UserError
from trajkit.models.base import ModelSpec, SamplingParams
from trajkit.prompts import judged_prompt, load_prompt
from trajkit.runner import StageContext, StageSpec
from trajkit.store import sql_condition
from trajkit.synth.transcripts import conversation_text, tool_listing

END = "<END_CONVERSATION>"
ENDED = "user simulator ended the conversation"  # an aborted extension's reason
SIMULATOR_FAILED = "user simulator request failed"  # the reason of a follow-up whose request failed: retried
DEFAULT_WHERE = "status = 'completed' AND reject_reason IS NULL"


class ExtendConfig(ServerPoolOptions):
    """Config of ``synth.extend``."""

    model: ModelSpec = Field(description="The agent model that continues the conversation.")
    user_model: ModelSpec | None = Field(
        None, description="The user-simulator model (default: the agent model; a field set alone changes only it)."
    )

    @model_validator(mode="before")
    @classmethod
    def _user_model_from_model(cls, data: Any) -> Any:
        """``--set user_model.cache=false`` alone: the user model is the agent model with that field changed."""
        user, agent = (data.get("user_model"), data.get("model")) if isinstance(data, dict) else (None, None)
        if isinstance(user, dict) and "model" not in user and isinstance(agent, dict):
            return {**data, "user_model": merge(agent, user)}
        return data

    rounds: int = Field(1, ge=1, description="Follow-ups per conversation; round r extends round r-1's rows.")
    where: str = Field(DEFAULT_WHERE, description="SQL condition on the trajectories view choosing the parents.")
    max_tokens: int = Field(1024, ge=1, description="Per agent model call.")
    user_temperature: float = Field(1.0, ge=0)
    user_max_tokens: int = Field(512, ge=1)
    max_turns: int = Field(8, ge=1, description="Agent model calls in the continuation.")
    max_conversation_chars: int = Field(12_000, ge=500, description="What the user simulator reads, cut in the middle.")
    prompts_dir: str | None = Field(None, description="A directory whose prompt files replace examples/prompts/.")
    rollout_fn: str | None = Field(None, description="Dotted path to a custom rollout function (see synth.rollouts).")


def follow_up(text: str | None, nonce: str) -> tuple[str | None, str | None]:
    """(the user's next message, or None and why) from the simulator's output: only the last
    ``<follow_up nonce="...">`` carrying the call's ``nonce`` (``prompts.judged_prompt``) counts, so a follow-up
    or an end marker echoed from the quoted conversation is never read."""
    if not text or not text.strip():
        return None, "user simulator wrote nothing"
    body = re.sub(r"<(think|thinking)>.*?</\1>", "", text, flags=re.DOTALL | re.IGNORECASE)
    found = re.findall(rf'<follow_up\s+nonce="{re.escape(nonce)}"\s*>(.*?)</follow_up\s*>', body, re.DOTALL)
    if not found:
        return None, "no follow-up carrying this call's nonce"
    message = found[-1].strip().strip('"').strip()
    if message == END:
        return None, ENDED
    return (message, None) if message else (None, "user simulator wrote an empty follow-up")


async def run_extend(ctx: StageContext, cfg: ExtendConfig) -> dict[str, Any]:
    from trajkit.envs.agent import load_rollout

    rollout = load_rollout(cfg.rollout_fn)
    servers = ctx.store.rows("servers")
    if not servers:
        raise UserError(f"no servers in {ctx.store.root}: run `trajkit synth harvest` first")
    prompt = load_prompt("user_simulator.md", cfg.prompts_dir, ("CONVERSATION", "NONCE"))
    chosen = set(
        ctx.store.sql(f"SELECT traj_id FROM trajectories WHERE {sql_condition(cfg.where, 'where')}")
        .column(0)
        .to_pylist()
    )
    chosen -= ctx.store.ids("trajectories", stage=ctx.name)  # never this stage's own rows: those are later rounds
    roots = sorted((r for r in ctx.store.rows("trajectories") if r["traj_id"] in chosen), key=lambda r: r["traj_id"])
    total = await _extend(ctx, cfg, rollout, servers, prompt, [r for r in roots if ctx.mine(r["traj_id"])])
    return {"extended": total, "rounds": cfg.rounds}


def retry_transient(ctx: StageContext, _: ExtendConfig) -> int:
    """Drop this rank's extensions that failed transiently, so they run again."""
    from trajkit.envs.agent import is_transient

    columns = ["traj_id", "parent_id", "status", "reason_code"]
    own = {r["traj_id"]: r for r in ctx.store.rows("trajectories", columns, stage=ctx.name)}
    again = {
        tid
        for tid, r in own.items()
        if r["status"] == "failed" and is_transient(r["reason_code"]) and ctx.mine(_root(r, own))
    }
    return ctx.store.drop_rows("trajectories", ctx.name, again)


def parents_for_round(own: list[dict[str, Any]], roots: list[dict[str, Any]], round_: int) -> list[dict[str, Any]]:
    """The conversations round ``round_`` extends, not yet extended: the chosen roots in round 1,
    then the previous round's completed rows of this stage (``own``), sorted by id."""
    by_id = {r["traj_id"]: r for r in own}
    depth: dict[str, int] = {}

    def depth_of(tid: str) -> int:  # 0 for a root, 1 for its extension, ...
        if tid not in by_id:
            return 0
        if tid not in depth:
            depth[tid] = 1 + depth_of(by_id[tid]["parent_id"])
        return depth[tid]

    extended = {r["parent_id"] for r in own}
    if round_ == 1:
        candidates = roots
    else:
        root_ids = {r["traj_id"] for r in roots}
        candidates = [
            r
            for r in own
            if depth_of(r["traj_id"]) == round_ - 1 and r["status"] == "completed" and _root(r, by_id) in root_ids
        ]
    return sorted((r for r in candidates if r["traj_id"] not in extended), key=lambda r: r["traj_id"])


def _root(row: dict[str, Any], own: dict[str, dict[str, Any]]) -> str:
    """The trajectory (from another stage) a chain of this stage's extensions started from."""
    while row["parent_id"] in own:
        row = own[row["parent_id"]]
    return row["parent_id"]


async def _extend(
    ctx: StageContext,
    cfg: ExtendConfig,
    rollout: Any,
    servers: list[dict[str, Any]],
    prompt: str,
    roots: list[dict[str, Any]],
) -> int:
    from trajkit.envs.tools import select_servers, tool_routes

    tasks = {t["task_id"]: t for t in ctx.store.rows("tasks")}
    agent = ctx.backend(cfg.model)
    user = ctx.backend(cfg.user_model or cfg.model)
    params, limits = cfg.sampling(), cfg.limits()  # each conversation is seeded by its own seed
    ctx.writer("trajectories", rows_per_shard=cfg.flush_rows)
    env = cfg.tool_env(servers, ctx.share)

    async def one(item: tuple[dict[str, Any], int]) -> dict[str, Any]:
        parent, round_ = item
        task = tasks.get(parent["task_id"]) or {"task_id": parent["task_id"], "server_ids": None}
        seed = conversation_seed(cfg.seed, parent, round_)
        try:
            rows = select_servers(servers, task.get("server_ids"))
            tools = tool_listing(rows, tool_routes(servers, task.get("server_ids")))
        except KeyError as e:
            tools = f"(servers unavailable: {e})"
        conversation = conversation_text(parent["messages"] or [], cfg.max_conversation_chars)
        text, nonce = judged_prompt(prompt, {"CONVERSATION": conversation, "TOOLS": tools})
        user_params = SamplingParams(n=1, temperature=cfg.user_temperature, max_tokens=cfg.user_max_tokens, seed=seed)
        [c] = await user.generate([{"role": "user", "content": text}], None, user_params)
        if c.error:  # the simulator's request failed: a fault a rerun may cure
            why = f"{SIMULATOR_FAILED}: {c.error}"[:500]
            return _declined(ctx.name, parent, agent, params, seed, why, "model_error")
        message, why = follow_up(c.text, nonce)
        if message is None:
            code = "conversation_ended" if why == ENDED else "extension_failed"
            return _declined(ctx.name, parent, agent, params, seed, why, code)
        continued = {**task, "question": message, "verifier": None}
        return await staged_episode(
            rollout,
            ctx.name,
            continued,
            agent,
            env,
            params,
            limits,
            history=parent["messages"],
            rollout_index=parent["rollout_index"] or 0,
            seed=seed,
            policy_version=parent.get("policy_version"),
            parent_id=parent["traj_id"],
        )

    total = 0
    try:
        async with env:
            for round_ in range(1, cfg.rounds + 1):
                ctx.flush()  # the previous round's rows are this round's parents
                own = ctx.store.rows("trajectories", stage=ctx.name)
                todo = [(p, round_) for p in parents_for_round(own, roots, round_)]
                ctx.log(f"round {round_}: {len(todo)} conversations to extend")
                await ctx.fan_out(
                    todo,
                    one,
                    concurrency=cfg.concurrency,
                    unit=f"round {round_}",
                    write=lambda _, row: ctx.write("trajectories", row),
                )
                total += len(todo)
    finally:
        await agent.aclose()
        await user.aclose()
    return total


def conversation_seed(seed: int, parent: dict[str, Any], round_: int) -> int:
    """The seed of an extension: its parent's task, rollout index and seed, and the round (not the
    parent's id, which names the model, a local model by its path)."""
    parent_seed = (parent.get("sampling") or {}).get("seed")
    return S.seed_for(seed, parent["task_id"], parent["rollout_index"], parent_seed, round_)


def _declined(
    stage: str, parent: dict[str, Any], agent: Any, params: SamplingParams, seed: int, why: str | None, code: str
) -> dict[str, Any]:
    """The row of an extension the user simulator did not give a follow-up for (``code``: why, as a reason code)."""
    head = episode_head(parent["task_id"], parent["rollout_index"] or 0, agent, params, seed, parent["traj_id"], stage)
    return {
        **head,
        "status": "aborted" if code == "conversation_ended" else "failed",  # ended on purpose vs. no follow-up
        "reason": why,
        "reason_code": code,
    }


EXTEND = StageSpec(
    "synth.extend",
    ExtendConfig,
    run_extend,
    retry=retry_transient,
    inputs=("trajectories", "tasks", "servers"),
    outputs=("trajectories",),
    help="Extend conversations: a user-simulator model writes a follow-up, the agent loop continues.",
)
