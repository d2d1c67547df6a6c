"""`synth.tasks`: tool-use tasks from harvested servers, in Toucan's modes, with verbalized sampling.

Each request draws servers and target tools (``sampling.py``), renders the
mode's prompt (``examples/prompts/task_<mode>.md`` plus the method's output
format) and asks the generator for candidates: ``direct`` takes k completions
of one task each; ``vs_standard`` and ``vs_cot`` take k candidates with
verbalized probabilities in one completion; ``vs_multi`` asks in turns of m
until k. Every candidate the model returned becomes a ``tasks`` row (one the
run already holds: a ``duplicate_task`` reject only); unusable ones (unparseable,
refusal, unknown target tool, a question that names a tool, a bad outcome
check, a task that does not fit its mode: ``mode_mismatch``) also get a
``rejected`` row with the reason.

A request's id hashes its mode, servers, tools, method, k, seed and index; a
task's id hashes what defines it (question, servers, target tools, verifier:
``task_id``), so a task is one id in a run whichever request wrote it; a
candidate that holds no task (unparseable output, a refusal, a failed call) or
does not fit its request's mode keeps its candidate's id (request, index,
generator). The sampling seed of a request's turn t is
``schema.seed_for(request_id, t)``. A resumed run skips the requests whose
rows exist, except transient failures: a failed model call is a
``generation_error`` reject under its candidate's id (never a task row), and
the next run of the stage (a resume) drops this rank's rows of such requests,
with their ``rejected`` rows, and asks again — as every stage retries its
transient failures. Unparseable output and refusals are the model's answer and stay.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, model_validator

from trajkit import schema as S
from trajkit.config import StageConfig, Unhashed
from trajkit.errors import UserError
from trajkit.models.base import ModelSpec, SamplingParams
from trajkit.prompts import load_prompt, render
from trajkit.runner import StageContext, StageSpec
from trajkit.synth import sampling as sampling_
from trajkit.synth import vs
from trajkit.synth.candidates import MODE_MISMATCH, ToolIndex, is_refusal, to_task, utf8
from trajkit.synth.transcripts import tool_listing

Mode = Literal[S.SYNTH_MODES]  # type: ignore[valid-type]
PROMPT_FILES = {m: f"task_{m}.md" for m in S.SYNTH_MODES}
GENERATION_ERROR = "generation_error"  # the reject reason of a request whose model call failed: retried


class TasksConfig(StageConfig):
    """Config of ``synth.tasks``."""

    model: ModelSpec = Field(description="The generator model.")
    modes: list[Mode] = Field(default_factory=lambda: list(S.SYNTH_MODES), description="Toucan's synthesis modes.")
    requests_per_mode: int = Field(10, ge=1, description="Generation requests per mode.")
    method: Literal[S.VS_METHODS] = Field(  # type: ignore[valid-type]
        "vs_standard",
        description="How candidates are asked for: direct (k completions of one task) or vs_* (verbalized sampling).",
    )
    k: int = Field(5, ge=1, description="Candidates per request.")
    m: int = Field(2, ge=1, description="vs_multi: candidates asked for per turn.")
    tail: float | None = Field(None, gt=0, le=1, description="Ask for candidates each with probability below this.")
    sampling: Literal["uniform", "power_law", "list"] = Field("uniform", description="How servers are drawn.")
    servers: list[str] | None = Field(None, description="Server names or ids to use (required for sampling=list).")
    alpha: float = Field(1.0, gt=0, description="power_law: weight of the server ranked r is 1/r**alpha.")
    weights: dict[str, float] | None = Field(None, description="power_law: server name/id -> weight (default: tools).")
    tools_per_task: tuple[int, int] = Field((2, 3), description="multi_tool/multi_server: tools per task (min, max).")
    servers_per_task: int = Field(2, ge=2, description="multi_server: servers per task.")
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int = Field(2048, ge=1)
    seed: int = Field(0, description="Seeds server draws and generation.")
    prompts_dir: str | None = Field(None, description="A directory whose prompt files replace examples/prompts/.")
    concurrency: Unhashed[int] = Field(8, ge=1, description="Requests in flight.")
    flush_rows: Unhashed[int] = Field(256, ge=1, description="Rows per written shard.")

    @model_validator(mode="after")
    def _check(self) -> TasksConfig:
        lo, hi = self.tools_per_task
        if not 2 <= lo <= hi:
            raise ValueError("tools_per_task must be (min, max) with 2 <= min <= max")
        if self.sampling == "list" and not self.servers:
            raise ValueError("sampling=list needs 'servers'")
        return self


@dataclass(frozen=True)
class Request:
    """One generation request: what it asks for, and its id."""

    request_id: str
    mode: str
    index: int
    draw: sampling_.Draw


def candidate_id(request_id: str, candidate_index: int, generator: str) -> str:
    """The id of a generator's candidate for a request: a task row's id until its question is known (a failed
    call, an output that holds no task), and a duplicate's ``rejected`` row id."""
    return S.content_id(request_id, candidate_index, generator)


def task_id(row: dict[str, Any]) -> str:
    """A task's id: a hash of what defines it (question, servers, target tools, verifier), so the same task
    from two requests, stages or generators is one id in a run; a row without a question keeps its candidate's."""
    if row["question"] is None:
        return row["task_id"]
    return S.content_id("task", row["question"], sorted(row["server_ids"]), row["target_tools"], row["verifier"])


def turn_seed(request_id: str, turn: int) -> int:
    """The sampling seed of a request's turn (direct and VS requests have one turn, VS-Multi several)."""
    return S.seed_for(request_id, turn)


def retry_failed_requests(ctx: StageContext, cfg: TasksConfig) -> int:
    """Drop this rank's rows of requests whose generation failed, and their ``rejected`` rows, so they run again.

    A failed call leaves a ``generation_error`` reject under its candidate's id and no task row; a request
    with no task row runs again anyway (it is not done), one with some (a VS-Multi turn after a good one
    failed) loses them here. Reads this rank's own shards: the stage's rejects are flushed before its
    tasks, so a reject whose task is missing was left by a kill between the two and is dropped too (its
    request runs again and rejects afresh).
    """
    import pyarrow.parquet as pq

    def mine(table: str, columns: list[str]) -> list[dict[str, Any]]:
        shards = ctx.store.shards(table, ctx.name, rank=ctx.rank)
        return [r for p in shards for r in pq.read_table(p, columns=columns).to_pylist()]

    rejects = mine("rejected", ["reject_id", "row_id", "reason"])
    if not rejects:
        return 0
    requests, _ = plan_requests(cfg, sampling_.usable_servers(ctx.store.rows("servers"), cfg.servers))
    candidates = {candidate_id(r.request_id, i, cfg.model.model): r.request_id for r in requests for i in range(cfg.k)}
    tasks = mine("tasks", ["task_id", "source_id"])
    request_of = {**candidates, **{t["task_id"]: t["source_id"] for t in tasks}}
    failed = {request_of.get(r["row_id"]) for r in rejects if r["reason"] == GENERATION_ERROR} - {None}
    redo = failed | ({r.request_id for r in requests} - {t["source_id"] for t in tasks})
    ctx.store.drop_rows("tasks", ctx.name, {t["task_id"] for t in tasks if t["source_id"] in failed})
    # tasks first: a kill here leaves rejects the next run drops; a reject of no known row lost its task to a kill
    lost = {r["reject_id"] for r in rejects if request_of.get(r["row_id"]) in redo | {None}}
    ctx.store.drop_rows("rejected", ctx.name, lost)
    return len(failed)


def plan_requests(cfg: TasksConfig, servers: list[dict[str, Any]]) -> tuple[list[Request], dict[str, int]]:
    """Every request of the stage, in a fixed order, and per-mode counts of requests no server can serve."""
    weights = sampling_.server_weights(servers, cfg.sampling, cfg.alpha, cfg.weights)
    requests, skipped = [], {}
    for mode in cfg.modes:
        for i in range(cfg.requests_per_mode):
            rng = random.Random(S.content_id("draw", cfg.seed, mode, i))
            d = sampling_.draw(mode, servers, weights, rng, cfg.tools_per_task, cfg.servers_per_task)
            if d is None:
                skipped[mode] = skipped.get(mode, 0) + 1
                continue
            rid = S.content_id(
                mode, [s["server_id"] for s in d.servers], [list(t) for t in d.tools], cfg.method, cfg.k, cfg.seed, i
            )
            requests.append(Request(rid, mode, i, d))
    return requests, skipped


async def run_tasks(ctx: StageContext, cfg: TasksConfig) -> dict[str, Any]:
    prompts = _Prompts(cfg)
    rows = ctx.store.rows("servers")
    if not rows:
        raise UserError(f"no servers in {ctx.store.root}: run `trajkit synth harvest` first")
    servers = sampling_.usable_servers(rows, cfg.servers)
    if not servers:
        raise UserError("no harvested server with status ok and tools")
    requests, skipped = plan_requests(cfg, servers)
    for mode, n in skipped.items():
        ctx.counts[f"skipped.{mode}.no_eligible_servers"] += n
    done = {r["source_id"] for r in ctx.store.rows("tasks", ["source_id"], stage=ctx.name)}
    todo = ctx.todo(requests, done, key=lambda r: r.request_id)
    ctx.log(f"{len(todo)} requests to run ({cfg.method}, k={cfg.k}) over {len(servers)} servers")
    await _generate(ctx, cfg, prompts, todo, rows)
    return {"requests": len(requests), "method": cfg.method}


async def _generate(
    ctx: StageContext, cfg: TasksConfig, prompts: _Prompts, todo: list[Request], servers_rows: list[dict[str, Any]]
) -> None:
    from trajkit.envs.tools import tool_routes

    backend = ctx.backend(cfg.model)
    seen = ctx.store.ids("tasks")  # every stage's: a task written before is not written again

    async def one(req: Request) -> list[tuple[dict[str, Any], str | None, str | None]]:
        routes = tool_routes(servers_rows, [s["server_id"] for s in req.draw.servers])
        return await _request(backend, cfg, prompts, req, routes)

    def keep(req: Request, results: list[tuple[dict[str, Any], str | None, str | None]]) -> int:
        rows = []
        for i, (row, reason, detail) in enumerate(results):
            if reason == GENERATION_ERROR:  # a failed call is a reject only: it wrote no task
                ctx.reject("tasks", row["task_id"], reason, detail)
                continue
            if row["task_id"] in seen:  # the provenance of a task written before: kept as a reject of its own
                where = f"{row['generator_model']}, request {req.request_id}"
                ctx.reject(
                    "tasks",
                    candidate_id(req.request_id, i, cfg.model.model),
                    "duplicate_task",
                    f"{row['task_id']} ({where})",
                )
                continue
            seen.add(row["task_id"])
            if reason:
                ctx.reject("tasks", row["task_id"], reason, detail)
            rows.append(row)
        ctx.write("tasks", rows)
        return len(results)

    flush = (cfg.flush_rows, ("rejected", "tasks"))
    try:
        await ctx.fan_out(todo, one, concurrency=cfg.concurrency, unit="requests", write=keep, flush=flush)
    finally:
        await backend.aclose()


class _Prompts:
    """The stage's prompt files, read and checked once before any request."""

    def __init__(self, cfg: TasksConfig):
        self.modes = {m: load_prompt(PROMPT_FILES[m], cfg.prompts_dir, ("FORMAT",)) for m in cfg.modes}
        self.fields = load_prompt("task_fields.md", cfg.prompts_dir)
        first_k = min(cfg.m, cfg.k) if cfg.method == "vs_multi" else cfg.k
        self.format = vs.format_instructions(cfg.method, first_k, cfg.tail, cfg.prompts_dir)

    def render(self, req: Request, routes: list[Any]) -> str:
        names = {(r.server, r.tool): r.name for r in routes}
        return render(
            self.modes[req.mode],
            TARGET_TOOLS=", ".join(names[t] for t in req.draw.tools),
            NUM_TOOLS=len(req.draw.tools),
            NUM_SERVERS=len(req.draw.servers),
            TOOLS=tool_listing(req.draw.servers, routes),
            TASK_FIELDS=self.fields.strip(),
            FORMAT=self.format,
        )


async def _request(
    backend: Any, cfg: TasksConfig, prompts: _Prompts, req: Request, routes: list[Any]
) -> list[tuple[dict[str, Any], str | None, str | None]]:
    """All candidates of one request as (row, reject reason, detail); faults become rows, never exceptions."""
    index = ToolIndex(routes)
    messages = [{"role": "user", "content": prompts.render(req, routes)}]
    params = {"temperature": cfg.temperature, "top_p": cfg.top_p, "max_tokens": cfg.max_tokens}
    out: list[tuple[dict[str, Any], str | None, str | None]] = []

    def add(
        candidate: dict[str, Any] | None, raw: str | None, reason: str | None, detail: str | None, **meta: Any
    ) -> None:
        i = len(out)
        base = _base_row(cfg, req, i, raw, meta)
        if candidate is None:
            out.append((base, reason, detail))
            return
        fields, reject, why = to_task(candidate, index, req.mode)
        prob = candidate.get("probability")
        base.update(fields, vs_probability=prob if cfg.method != "direct" else None)
        if reject != MODE_MISMATCH:  # one that does not fit its request's mode is that request's, not a task
            base["task_id"] = task_id(base)
        if cfg.tail is not None and prob is not None and prob >= cfg.tail:
            base["metadata"] = json.dumps({**json.loads(base["metadata"]), "above_tail": True}, sort_keys=True)
        out.append((base, reject, why))

    if cfg.method == "direct":
        sampling = SamplingParams(n=cfg.k, seed=turn_seed(req.request_id, 0), **params)
        completions = await backend.generate(messages, None, sampling)
        for c in completions:
            _add_completion(add, c, limit=1)
        return out
    # VS-Multi asks in turns of m until k candidates are in; every turn adds at least one row
    # (a candidate, or the turn's unparseable output), so k turns bound it
    turns = cfg.k if cfg.method == "vs_multi" else 1
    for turn in range(turns):
        want = min(cfg.m, cfg.k - len(out)) if cfg.method == "vs_multi" else cfg.k
        if want <= 0:
            break
        if turn:
            messages.append({"role": "user", "content": vs.continue_instructions(want, cfg.tail, cfg.prompts_dir)})
        sampling = SamplingParams(n=1, seed=turn_seed(req.request_id, turn), **params)
        [c] = await backend.generate(messages, None, sampling)
        if c.error:
            add(None, None, GENERATION_ERROR, c.error[:500], turn=turn)
            break
        _add_completion(add, c, limit=want, turn=turn)
        messages.append({"role": "assistant", "content": c.text})
    return out


def _add_completion(add: Any, c: Any, limit: int, **meta: Any) -> None:
    if c.error:
        add(None, None, GENERATION_ERROR, c.error[:500], **meta)
        return
    meta = {**meta, "finish_reason": c.finish_reason}
    parsed = vs.parse_candidates(c.text)
    if not parsed.candidates:
        reason = "refusal" if is_refusal(c.text) else "unparseable"
        add(None, c.text, reason, parsed.reason, **meta)
        return
    for cand in parsed.candidates[:limit]:
        add(cand, c.text, None, None, **meta)


def _base_row(cfg: TasksConfig, req: Request, i: int, raw: str | None, meta: dict[str, Any]) -> dict[str, Any]:
    metadata = {
        "request_id": req.request_id,
        "request_index": req.index,
        "candidate_index": i,
        "drawn_tools": [f"{s}.{t}" for s, t in req.draw.tools],
        **meta,
    }
    return {
        "task_id": candidate_id(req.request_id, i, cfg.model.model),
        "source": "synth",
        "source_id": req.request_id,
        "question": None,
        "target_tools": None,
        "server_ids": [s["server_id"] for s in req.draw.servers],
        "mode": req.mode,
        "generator_model": cfg.model.model,
        "vs_method": cfg.method,
        "vs_probability": None,
        "verifier": None,
        "metadata": json.dumps(metadata, sort_keys=True),
        "raw_output": utf8(raw) if raw is not None else None,
    }


TASKS = StageSpec(
    "synth.tasks",
    TasksConfig,
    run_tasks,
    retry=retry_failed_requests,
    inputs=("servers",),
    outputs=("tasks", "rejected"),
    help="Synthesize tool-use tasks (single tool, multi tool, multi server) from the `servers` table, with direct or verbalized sampling.",
)
