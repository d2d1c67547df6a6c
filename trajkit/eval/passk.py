"""The ``eval.passk`` stage: pass@k of one or more models on a split, per difficulty bucket.

For each model and each task of the split, ``n`` attempts go through
``envs.solve.attempt`` (tool tasks run the agent loop, others one chat
completion: the same unit curation's pass@k tagging uses) and are judged by
the task's verifier through ``verify``. pass@k is the unbiased estimator
(``verify.pass_at_k``). An attempt that could not be judged (a model request
or a server failed) is counted by reason and left out of ``samples``. One
``eval_passk`` row per (model, task); the report per difficulty bucket (from
the ``passk`` annotation) lands in the manifest and in
``RUN/reports/<stage>.parquet``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import Field, field_validator, model_validator

from trajkit import schema as S
from trajkit.config import StageConfig
from trajkit.errors import UserError
from trajkit.eval.report import passk_report
from trajkit.models.base import ModelSpec
from trajkit.runner import StageContext, StageSpec
from trajkit.store import Store


class EvalPasskConfig(StageConfig):
    models: list[ModelSpec] = Field(min_length=1, description="One model, or several compared side by side.")
    split: str | None = Field("held_out", description="Tasks of this split (splits table); null for all tasks.")
    n: int = Field(10, ge=1, description="Attempts per task.")
    ks: list[int] = Field(default_factory=lambda: [1, 5, 10], description="Report pass@k at these k (each <= n).")
    temperature: float = 0.8
    top_p: float = 1.0
    max_tokens: int = 1024
    seed: int = Field(0, description="Attempt i uses seed + i.")
    system_prompt: str | None = None
    max_turns: int = Field(8, description="Tool tasks: model calls per episode.")
    tool_timeout_s: float = Field(30.0, description="Tool tasks: per tool call.")
    max_tool_output_chars: int = 4000
    servers_config: str | None = Field(None, description="mcpServers file with env values for the run's servers.")
    limit: int | None = Field(None, ge=1, description="Evaluate only the first N tasks (by task id).")
    concurrency: int = Field(16, ge=1, json_schema_extra={"hash": False}, description="Attempts in flight.")

    @field_validator("ks")
    @classmethod
    def _ks(cls, ks: list[int]) -> list[int]:
        if not ks or any(k < 1 for k in ks):
            raise ValueError("ks must be positive integers")
        return sorted(set(ks))

    @model_validator(mode="after")
    def _check(self) -> EvalPasskConfig:
        if max(self.ks) > self.n:
            raise ValueError(f"every k must be <= n ({self.n}); got {max(self.ks)}")
        names = [m.model for m in self.models]
        if len(set(names)) != len(names):
            raise ValueError(f"models must have distinct names; got {names}")
        if self.split is not None and self.split not in S.SPLITS:
            raise ValueError(f"split must be one of {', '.join(S.SPLITS)} or null")
        return self


def eval_id(spec: ModelSpec, task_id: str, cfg: EvalPasskConfig) -> str:
    return S.content_id(
        "eval.passk", spec.model, spec.backend, task_id, cfg.n, cfg.seed, cfg.temperature, cfg.top_p, cfg.max_tokens
    )


def load_tasks(store: Store, split: str | None, limit: int | None) -> list[dict[str, Any]]:
    """The split's tasks with their difficulty (from the passk annotation), by task id."""
    where = "WHERE split = ?" if split else ""
    query = f"SELECT task_id, question, server_ids, verifier, metadata, difficulty FROM tasks {where} ORDER BY task_id"
    con = store.duckdb()
    try:
        rel = con.sql(query + (f" LIMIT {int(limit)}" if limit else ""), params=[split] if split else None)
        rows = rel.to_arrow_table().to_pylist()
    finally:
        con.close()
    if not rows:
        what = f"split {split!r}" if split else "the run"
        raise UserError(f"no tasks in {what} of {store.root}" + ("; run `trajkit curate split` first" if split else ""))
    return rows


def run_eval_passk(ctx: StageContext, cfg: EvalPasskConfig) -> dict[str, Any]:
    tasks = load_tasks(ctx.store, cfg.split, cfg.limit)
    done = ctx.done("eval_passk")
    todo = [
        (m, t) for m in cfg.models for t in tasks if (i := eval_id(m, t["task_id"], cfg)) not in done and ctx.mine(i)
    ]
    ctx.log(f"{len(tasks)} task(s) x {len(cfg.models)} model(s), {len(todo)} to evaluate, {cfg.n} attempts each")
    if todo:
        asyncio.run(_evaluate(ctx, cfg, todo))
    ctx.flush()
    rows = ctx.store.rows("eval_passk", stage=ctx.name)
    report = passk_report(rows, [m.model for m in cfg.models], cfg.ks)
    _write_report(ctx, report)
    return {"split": cfg.split, "n": cfg.n, "ks": cfg.ks, "models": [m.model for m in cfg.models], "report": report}


async def _evaluate(ctx: StageContext, cfg: EvalPasskConfig, todo: list[tuple[ModelSpec, dict[str, Any]]]) -> None:
    from trajkit.envs.agent import AgentLimits
    from trajkit.envs.env import ToolEnv
    from trajkit.envs.solve import is_tool_task
    from trajkit.models import make_backend
    from trajkit.models.base import SamplingParams

    params = SamplingParams(n=1, temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens, seed=cfg.seed)
    limits = AgentLimits(
        max_turns=cfg.max_turns, tool_timeout_s=cfg.tool_timeout_s, max_tool_output_chars=cfg.max_tool_output_chars
    )
    backends = {m.model: make_backend(m, ctx.usage, ctx.store.root / "_cache") for m in cfg.models}
    env = None
    if any(is_tool_task(t) for _, t in todo):
        env = ToolEnv(ctx.store.rows("servers"), config=cfg.servers_config)
    gate = asyncio.Semaphore(cfg.concurrency)
    try:
        with ctx.progress(len(todo), "tasks") as advance:
            units = [
                _unit(ctx, cfg, spec, task, backends[spec.model], env, params, limits, gate) for spec, task in todo
            ]
            for finished in asyncio.as_completed(units):
                ctx.write("eval_passk", await finished)
                advance(1)
    finally:
        if env is not None:
            await env.aclose()
        for backend in backends.values():
            await backend.aclose()


async def _unit(
    ctx: StageContext,
    cfg: EvalPasskConfig,
    spec: ModelSpec,
    task: dict[str, Any],
    backend: Any,
    env: Any,
    params: Any,
    limits: Any,
    gate: asyncio.Semaphore,
) -> dict[str, Any]:
    """All attempts of one model at one task, judged: one eval_passk row."""
    from trajkit.envs.solve import attempt
    from trajkit.verify import pass_at_k, verify

    async def one(i: int) -> tuple[str | None, bool]:
        async with gate:
            a = await attempt(
                task, backend, env, params, limits, sample_index=i, seed=cfg.seed + i, system_prompt=cfg.system_prompt
            )
        if a.error:
            return a.error, False
        if a.completion is None:
            return None, False
        result = await asyncio.to_thread(verify, task["verifier"], a.completion, a.context)
        if result.verdict == "error":
            return f"verifier error: {result.details.get('reason', '')}", False
        return None, result.verdict == "pass"

    outcomes = await asyncio.gather(*(one(i) for i in range(cfg.n)))
    judged = [ok for err, ok in outcomes if err is None]
    for err, _ in outcomes:
        if err is not None:
            ctx.counts[f"unjudged.{err.split(':')[0][:60]}"] += 1
    samples, correct = len(judged), sum(judged)
    ctx.counts["attempts"] += cfg.n
    return {
        "eval_id": eval_id(spec, task["task_id"], cfg),
        "model": spec.model,
        "task_id": task["task_id"],
        "difficulty": task.get("difficulty"),
        "samples": samples,
        "correct": correct,
        "pass_at": [{"k": k, "value": pass_at_k(samples, correct, k)} for k in cfg.ks if k <= samples],
    }


def _write_report(ctx: StageContext, report: list[dict[str, Any]]) -> None:
    """The per-bucket report as a Parquet file next to the run's tables (RUN/reports/<stage>.parquet)."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from trajkit.store import atomic_write_bytes, safe_name

    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(report), buf)
    atomic_write_bytes(ctx.store.root / "reports" / f"{safe_name(ctx.name)}.parquet", buf.getvalue())


EVAL_PASSK = StageSpec(
    "eval.passk",
    EvalPasskConfig,
    run_eval_passk,
    inputs=("tasks", "passk", "splits"),
    outputs=("eval_passk",),
    help="pass@k (unbiased) of one or more models on a split, per difficulty bucket and overall.",
)
