"""The ``eval.passk`` stage: pass@k of one or more models on a split, per difficulty bucket.

The tasks are the split's tasks that another stage did not reject, with a
question and a verifier (skipped ones are counted). For each model and task,
``n`` attempts go through ``envs.solve.solve`` (tool tasks run the agent loop,
others one chat completion, judged by the task's verifier: the same unit
curation's pass@k tagging runs), attempt i seeded
``envs.agent.episode_seed(seed, task, i)`` (the same for every model). pass@k is the unbiased
estimator (``verify.pass_at_k``). An attempt that could not be judged (a model
request or a server failed, a verifier error) is counted by reason and left
out of ``samples``; such a row is redone when the stage runs again (a resume:
this rank's rows with fewer judged samples than ``n`` are dropped first), as
every stage retries its transient failures. One ``eval_passk`` row per (model,
task), flushed every ``flush_rows`` rows; its ``attempts`` keep each attempt's
text, verdict and reason (unjudged ones too), so a failure can be read. The
report per difficulty bucket (from the ``passk`` annotation) lands in the
manifest and in ``RUN/reports/<stage>.parquet``. Two compared models that one
endpoint serves as the same model (``same_model``) are a warning line, kept in
the summary.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import Field, field_validator, model_validator

from trajkit import schema as S
from trajkit.config import Unhashed
from trajkit.envs.options import EpisodeOptions
from trajkit.errors import UserError
from trajkit.eval.report import passk_report
from trajkit.models.base import ModelSpec
from trajkit.runner import StageContext, StageSpec
from trajkit.store import Store
from trajkit.verify.backends import SANDBOX_HELP, SandboxKind


class EvalPasskConfig(EpisodeOptions):
    models: list[ModelSpec] = Field(min_length=1, description="One model, or several compared side by side.")
    split: str | None = Field("held_out", description="Tasks of this split (splits table); null for all tasks.")
    n: int = Field(10, ge=1, description="Attempts per task.")
    ks: list[int] = Field(default_factory=lambda: [1, 5, 10], description="Report pass@k at these k (each <= n).")
    temperature: float = Field(0.8, ge=0, description="Sampling temperature.")
    seed: int = Field(0, description="Base seed; attempt i at a task derives its seed from it, the task, model and i.")
    system_prompt: str | None = None
    limit: int | None = Field(None, ge=1, description="Evaluate only the first N tasks (by task id).")
    concurrency: Unhashed[int] = Field(16, ge=1, description="Attempts in flight.")
    sandbox: Unhashed[SandboxKind] = Field("local", description=SANDBOX_HELP)
    workers: Unhashed[int | None] = Field(None, ge=1, description="Sandbox workers (default: CPUs).")
    flush_rows: Unhashed[int] = Field(16, ge=1, description="Rows per written shard.")

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
            raise ValueError(f"split must be one of {', '.join(S.SPLITS)}, or null for every task (--set split=null)")
        return self


def eval_id(spec: ModelSpec, task_id: str, cfg: EvalPasskConfig) -> str:
    return S.content_id(
        "eval.passk", spec.model, spec.backend, task_id, cfg.n, cfg.seed, cfg.temperature, cfg.top_p, cfg.max_tokens
    )


def load_tasks(store: Store, split: str | None, limit: int | None, counts: Any = None) -> list[dict[str, Any]]:
    """The split's tasks with their difficulty (from the passk annotation), by task id: those no stage
    rejected, with a question and a verifier (the others are counted in ``counts`` as ``skipped.<why>``)."""
    where = "WHERE split = ?" if split else ""
    query = (
        "SELECT task_id, question, server_ids, verifier, metadata, difficulty, reject_reason "
        f"FROM tasks {where} ORDER BY task_id"
    )
    con = store.duckdb()
    try:
        rows = con.sql(query, params=[split] if split else None).to_arrow_table().to_pylist()
    finally:
        con.close()
    out = []
    for row in rows:
        why = (
            "rejected"
            if row.pop("reject_reason") is not None
            else "no_question"
            if not row["question"]
            else "no_verifier"
            if (row["verifier"] or {}).get("kind") in (None, "", "none")
            else None
        )
        if why is not None:
            if counts is not None:
                counts[f"skipped.{why}"] += 1
            continue
        out.append(row)
    what = f"split {split!r}" if split else "the run"
    if not rows:
        raise UserError(f"no tasks in {what} of {store.root}" + (_no_split_hint(store, split) if split else ""))
    if not out:
        raise UserError(f"no task of {what} in {store.root} can be evaluated (rejected, or no question or verifier)")
    return out[:limit] if limit else out


def _no_split_hint(store: Store, split: str) -> str:
    """Why a split has no task: curate split never ran, or it put none there (a small run, a small share)."""
    if not store.count("splits"):
        return "; run `trajkit curate split` first"
    larger = "rerun `trajkit curate split --fresh` with a larger --held-out, or " if split == "held_out" else ""
    return f"; curate split put none there ({larger}evaluate every task with --set split=null)"


def retry_unjudged(ctx: StageContext, cfg: EvalPasskConfig) -> int:
    """Drop this rank's rows with fewer judged attempts than ``n``, so their units run again."""
    n = cfg.n
    data = ctx.store.read("eval_passk", ["eval_id", "samples"], stage=ctx.name).to_pylist()
    again = {r["eval_id"] for r in data if r["samples"] < n and ctx.mine(r["eval_id"])}
    return ctx.store.drop_rows("eval_passk", ctx.name, again)


async def run_eval_passk(ctx: StageContext, cfg: EvalPasskConfig) -> dict[str, Any]:
    from trajkit.verify import check_custom_verifiers

    tasks = load_tasks(ctx.store, cfg.split, cfg.limit, ctx.counts)
    check_custom_verifiers(t["verifier"] for t in tasks)
    same = await asyncio.to_thread(same_model, cfg.models)
    for warning in same:
        ctx.log(f"warning: {warning}")
    units = [(m, t) for m in cfg.models for t in tasks]
    todo = ctx.todo(units, "eval_passk", key=lambda u: eval_id(u[0], u[1]["task_id"], cfg))
    ctx.log(f"{len(tasks)} task(s) x {len(cfg.models)} model(s), {len(todo)} to evaluate, {cfg.n} attempts each")
    if todo:
        await _evaluate(ctx, cfg, todo)
    ctx.flush()
    return summarize(ctx, cfg) | ({"same_model": same} if same else {})


def same_model(models: list[ModelSpec]) -> list[str]:
    """One line per pair of compared models that one endpoint serves as the same model: both names answered
    by the same entry of its ``GET /v1/models`` (vLLM's aliases of one ``root``; a server listing one model,
    such as ``trajkit model serve --script`` or llama.cpp's, which answers any name with it). Asked before
    any request, so the comparison is flagged whatever the answers."""
    from trajkit.models.openai_backend import OpenAIBackend

    first: dict[tuple[str, str], str] = {}  # (endpoint, what it serves) -> the first model name served so
    out = []
    for spec in models:
        if spec.backend != "openai":
            continue
        for url, served in OpenAIBackend(spec).served().items():
            other = first.setdefault((url, served), spec.model)
            if other != spec.model:
                out.append(
                    f"{other!r} and {spec.model!r} are one model at {url} (it serves both as {served!r}): "
                    "this compares that model with itself"
                )
    return out


def summarize(ctx: StageContext, cfg: EvalPasskConfig) -> dict[str, Any]:
    """The stage's report over every shard's rows (also written as RUN/reports/<stage>.parquet)."""
    rows = ctx.store.rows("eval_passk", stage=ctx.name)
    report = passk_report(rows, [m.model for m in cfg.models], cfg.ks)
    _write_report(ctx, report)
    return {"split": cfg.split, "n": cfg.n, "ks": cfg.ks, "models": [m.model for m in cfg.models], "report": report}


async def _evaluate(ctx: StageContext, cfg: EvalPasskConfig, todo: list[tuple[ModelSpec, dict[str, Any]]]) -> None:
    from trajkit.envs.solve import Solver

    tasks = [task for _, task in todo]
    solver = Solver.for_stage(
        ctx, cfg, cfg.models, tasks, system_prompt=cfg.system_prompt, sandbox=cfg.sandbox, workers=cfg.workers
    )
    gate = asyncio.Semaphore(cfg.concurrency)  # attempts in flight, across the units in flight

    async def unit(item: tuple[ModelSpec, dict[str, Any]]) -> dict[str, Any]:
        spec, task = item
        return await _unit(ctx, cfg, spec, task, solver, gate)

    async with solver:
        await ctx.fan_out(
            todo,
            unit,
            concurrency=cfg.concurrency,
            unit="tasks",
            write=lambda _, row: ctx.write("eval_passk", row),
            flush=(cfg.flush_rows, ("eval_passk",)),
        )


async def _unit(
    ctx: StageContext,
    cfg: EvalPasskConfig,
    spec: ModelSpec,
    task: dict[str, Any],
    solver: Any,
    gate: asyncio.Semaphore,
) -> dict[str, Any]:
    """All attempts of one model at one task, judged: one eval_passk row."""
    from trajkit.verify import pass_at_k

    async def one(i: int) -> Any:
        async with gate:
            return await solver.solve(task, spec.model, i)

    solved = await asyncio.gather(*(one(i) for i in range(cfg.n)))
    attempts = [attempt_record(task["task_id"], spec.model, i, s) for i, s in enumerate(solved)]
    judged = [a["verdict"] == "pass" for a in attempts if a["verdict"] != "error"]
    for a in attempts:
        if a["verdict"] == "error":  # an attempt's fault says which (a failed model request, ...), by its code
            ctx.counts[f"unjudged.{a['reason_code'] or 'verifier_error'}"] += 1
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
        "attempts": attempts,
    }


def attempt_record(task_id: str, model: str, index: int, solved: Any) -> dict[str, Any]:
    """One attempt as ``eval_passk.attempts`` keeps it: a ``samples`` row's text, verdict and why, plus the
    reason it failed or could not be judged, where the verifier or the attempt gives one."""
    from trajkit.envs.solve import sample_row

    a, result = solved.attempt, solved.result
    row = sample_row("", task_id, index, model, a.completion, result, reason_code=a.reason_code)
    reason = result.details.get("reason")
    return {f.name: row.get(f.name) for f in S.ATTEMPT} | {"reason": reason if isinstance(reason, str) else None}


def _write_report(ctx: StageContext, report: list[dict[str, Any]]) -> None:
    """The per-bucket report as a Parquet file next to the run's tables (RUN/reports/<stage>.parquet)."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from trajkit.store import atomic_write_bytes, safe_name

    buf = io.BytesIO()
    pq.write_table(ctx.store.redactor.table(pa.Table.from_pylist(report)), buf)
    atomic_write_bytes(ctx.store.root / "reports" / f"{safe_name(ctx.name)}.parquet", buf.getvalue())


EVAL_PASSK = StageSpec(
    "eval.passk",
    EvalPasskConfig,
    run_eval_passk,
    retry=retry_unjudged,
    report=summarize,
    inputs=("tasks", "passk", "splits"),
    outputs=("eval_passk",),
    help="pass@k (unbiased) of one or more models on a split, per difficulty bucket and overall (eval_passk).",
)
