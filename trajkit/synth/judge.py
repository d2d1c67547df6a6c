"""`synth.judge`: an LLM judge scores tasks and trajectories; tool accuracy is computed, not judged.

Tasks get Toucan's six dimensions (1-5) in ``task_quality``, with
``quality_score`` their mean when all six were read. Trajectories get
completeness and conciseness in ``trajectory_quality``, plus the share of the
task's target tools the agent used and whether it used them in order. The
prompts are ``judge_task.md`` and ``judge_trajectory.md`` (override with
``prompts_dir``). A judgment that cannot be read keeps null scores, the judge's
raw text and the reason, with ``judge_reason_code`` ``judge_unreadable`` (which
``synth.filter`` rejects by default): never a default score. A judge request that
failed (``judge request failed: ...``, ``model_error``, a transient failure) is
written the same way, and the next run of the stage (a resume) drops this rank's
rows of those and asks again, as every stage retries its transient failures: by
the reason code, never by the reason's text (which quotes the judge).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from trajkit import schema as S
from trajkit.config import StageConfig, Unhashed
from trajkit.models.base import ModelSpec, SamplingParams
from trajkit.prompts import judged_prompt, load_prompt
from trajkit.runner import StageContext, StageSpec
from trajkit.synth.ratings import TASK_DIMENSIONS, TRAJECTORY_DIMENSIONS, Judgment, mean_score, parse_judgment
from trajkit.synth.tool_accuracy import tool_accuracy
from trajkit.synth.transcripts import conversation_text, tool_listing

REQUEST_FAILED = "judge request failed"  # the judge_reason of a failed judge request (model_error: retried)


class JudgeConfig(StageConfig):
    """Config of ``synth.judge``."""

    model: ModelSpec = Field(description="The judge model.")
    targets: list[Literal["tasks", "trajectories"]] = Field(
        default_factory=lambda: ["tasks", "trajectories"], description="What to judge."
    )
    statuses: list[str] = Field(default_factory=lambda: ["completed"], description="Trajectory statuses to judge.")
    include_rejected: bool = Field(False, description="Also judge rows some stage rejected.")
    temperature: float = Field(0.0, ge=0)
    max_tokens: int = Field(1024, ge=1)
    seed: int = 0
    max_conversation_chars: int = Field(12_000, ge=500, description="Longer conversations are cut in the middle.")
    prompts_dir: str | None = Field(None, description="A directory whose prompt files replace examples/prompts/.")
    concurrency: Unhashed[int] = Field(8, ge=1)
    flush_rows: Unhashed[int] = Field(256, ge=1, description="Rows per written shard.")


def retry_failed_requests(ctx: StageContext, _: JudgeConfig) -> int:
    """Drop this rank's judgments whose request failed, so they are asked again."""
    dropped = 0
    for table in ("task_quality", "trajectory_quality"):
        key = S.table(table).key
        data = ctx.store.read(table, [key, "judge_reason_code"], stage=ctx.name).to_pylist()
        again = {r[key] for r in data if r["judge_reason_code"] in S.TRANSIENT and ctx.mine(r[key])}
        dropped += ctx.store.drop_rows(table, ctx.name, again)
    return dropped


async def run_judge(ctx: StageContext, cfg: JudgeConfig) -> dict[str, Any]:
    store = ctx.store
    tasks = {t["task_id"]: t for t in store.rows("tasks") if t["question"]}
    items: list[tuple[str, dict[str, Any]]] = []
    if "tasks" in cfg.targets:
        rejected = set() if cfg.include_rejected else store.rejected("tasks")
        judged = [t for tid, t in sorted(tasks.items()) if tid not in rejected]
        items += [("task", t) for t in ctx.todo(judged, "task_quality", key="task_id")]
    if "trajectories" in cfg.targets:
        rejected = set() if cfg.include_rejected else store.rejected("trajectories")
        rows = sorted(store.rows("trajectories"), key=lambda r: r["traj_id"])
        judged = [r for r in rows if r["status"] in cfg.statuses and r["traj_id"] not in rejected]
        items += [("trajectory", r) for r in ctx.todo(judged, "trajectory_quality", key="traj_id")]
    ctx.log(f"judging {len(items)} rows")
    await _judge_all(ctx, cfg, items, tasks)
    return {"judged": len(items)}


async def _judge_all(
    ctx: StageContext, cfg: JudgeConfig, items: list[tuple[str, dict[str, Any]]], tasks: dict[str, dict[str, Any]]
) -> None:
    from trajkit.envs.tools import select_servers, tool_routes

    servers = ctx.store.rows("servers")
    prompt_task = load_prompt("judge_task.md", cfg.prompts_dir, ("QUESTION", "TOOLS", "NONCE"))
    prompt_traj = load_prompt("judge_trajectory.md", cfg.prompts_dir, ("CONVERSATION", "NONCE"))
    backend = ctx.backend(cfg.model)
    params = SamplingParams(n=1, temperature=cfg.temperature, max_tokens=cfg.max_tokens, seed=cfg.seed)
    for table in ("task_quality", "trajectory_quality"):
        ctx.writer(table, rows_per_shard=cfg.flush_rows)

    async def ask(prompt: str) -> tuple[str | None, str | None]:
        [c] = await backend.generate([{"role": "user", "content": prompt}], None, params)
        return (None, f"{REQUEST_FAILED}: {c.error}"[:500]) if c.error else (c.text, None)

    async def judge(item: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
        kind, row = item
        if kind == "task":
            try:
                rows = select_servers(servers, row["server_ids"])
                tools = tool_listing(rows, tool_routes(servers, row["server_ids"]))
            except KeyError as e:
                tools = f"(servers unavailable: {e})"
            prompt, nonce = task_prompt(prompt_task, row, tools)
            raw, failure = await ask(prompt)
            return "task_quality", task_quality(row["task_id"], cfg.model.model, raw, failure, nonce)
        task = tasks.get(row["task_id"]) or {}
        prompt, nonce = trajectory_prompt(prompt_traj, task, row, cfg.max_conversation_chars)
        raw, failure = await ask(prompt)
        return "trajectory_quality", trajectory_quality(
            row, task.get("target_tools"), cfg.model.model, raw, failure, nonce
        )

    try:
        await ctx.fan_out(
            items, judge, concurrency=cfg.concurrency, unit="judged", write=lambda _, out: ctx.write(*out)
        )
    finally:
        await backend.aclose()


def task_quality(
    task_id: str, judge_model: str, raw: str | None, failure: str | None, nonce: str | None
) -> dict[str, Any]:
    """A ``task_quality`` row from the judge's text (or the reason there is none)."""
    judgment = parse_judgment(raw, TASK_DIMENSIONS, nonce)
    return {
        "task_id": task_id,
        "judge_model": judge_model,
        **judgment.scores,
        "quality_score": mean_score(judgment.scores),
        "judge_reason": failure or judgment.reason,
        "judge_raw": raw,
        "judge_reason_code": _code(failure, judgment),
    }


def trajectory_quality(
    traj: dict[str, Any],
    target_tools: list[str] | None,
    judge_model: str,
    raw: str | None,
    failure: str | None,
    nonce: str | None,
) -> dict[str, Any]:
    """A ``trajectory_quality`` row: judged completeness and conciseness, computed tool accuracy."""
    judgment = parse_judgment(raw, TRAJECTORY_DIMENSIONS, nonce)
    share, in_order = tool_accuracy(target_tools, traj.get("tools_called"))
    return {
        "traj_id": traj["traj_id"],
        "judge_model": judge_model,
        **judgment.scores,
        "tool_accuracy": share,
        "order_correct": in_order,
        "judge_reason": failure or judgment.reason,
        "judge_raw": raw,
        "judge_reason_code": _code(failure, judgment),
    }


def _code(failure: str | None, judgment: Judgment) -> str | None:
    """A judge row's ``judge_reason_code``: its request failed, or its answer could not be (fully) read."""
    return "model_error" if failure else "judge_unreadable" if judgment.reason else None


def task_prompt(template: str, task: dict[str, Any], tools: str) -> tuple[str, str]:
    """The judge's prompt for one task and its nonce: everything it rates in the call's data blocks."""
    data = {"TOOLS": tools, "QUESTION": task["question"], "TARGET_TOOLS": _tools(task)}
    return judged_prompt(template, data)


def trajectory_prompt(template: str, task: dict[str, Any], traj: dict[str, Any], max_chars: int) -> tuple[str, str]:
    """The judge's prompt for one trajectory and its nonce: everything it rates in the call's data blocks."""
    data = {
        "QUESTION": task.get("question") or _first_user(traj),
        "TARGET_TOOLS": _tools(task),
        "CONVERSATION": conversation_text(traj["messages"] or [], max_chars),
    }
    return judged_prompt(template, data)


def _tools(task: dict[str, Any]) -> str:
    return ", ".join(task.get("target_tools") or []) or "(none given)"


def _first_user(traj: dict[str, Any]) -> str:
    return next((m.get("content") or "" for m in traj.get("messages") or [] if m.get("role") == "user"), "")


JUDGE = StageSpec(
    "synth.judge",
    JudgeConfig,
    run_judge,
    retry=retry_failed_requests,
    inputs=("tasks", "trajectories", "servers"),
    outputs=("task_quality", "trajectory_quality"),
    help="LLM-judge tasks (Toucan's six dimensions) and trajectories (completeness, conciseness, tool accuracy).",
)
