"""``curate.traces``: what another agent did, as ``tasks`` and ``trajectories`` rows.

Without ``path`` the stage reads the run's recording (``trajkit model serve
--record``); with one, a trace file a team already has: OpenAI chat JSONL,
ShareGPT, or OpenTelemetry GenAI spans as Langfuse or Phoenix export them
(``format`` found from the first record unless given). Calls are grouped into
trajectories (``threads``); each becomes a row of the one ``trajectories``
schema, ``source`` ``recorded`` or ``imported``, with token ids where the
upstream returned them, and its task (the first user message; mode ``trace``,
``source`` the same, id a hash of the question) a row unless the run has it.
``synth judge``, ``synth filter``, the viewer, ``export``, ``card``, ``train
sft`` and ``sql`` read them as any rows.

``tasks``: a file (JSONL, JSON or Parquet) of ``{"question" or "task_id",
"verifier": {"kind", "spec"}}`` records. Each verifier attaches to the traces'
task of that question (its task row carries it) and its trajectories get a
``verdict`` from it, judged as rollouts are (``envs.solve``). To attach
verifiers to rows already written, rerun the stage with ``--fresh`` and the
file: ids do not change (a trajectory's is a hash of its first call's, a
task's of its question), so judgments and reviews of the rows still join.
The same holds for a recording that grew since the stage ran.

Recorded calls also go into the run's call cache, keyed as ``model serve
--replay`` looks a request up (``models.replay.request_call``), with each
answer as it was returned: the agent, rerun against ``--replay RUN``, gets the
same answers without the upstream.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from pydantic import Field

from trajkit.config import StageConfig, Unhashed
from trajkit.curate.threads import Call, group, question, task_id, trajectory_row
from trajkit.curate.trace_files import Format, file_calls, recorded_calls
from trajkit.errors import UserError
from trajkit.runner import StageContext, StageSpec
from trajkit.schema import content_id
from trajkit.verify.backends import SANDBOX_HELP, SandboxKind


class TracesConfig(StageConfig):
    """Config of ``curate.traces``."""

    path: str | None = Field(
        None,
        description="A trace file to import (OpenAI chat JSONL, ShareGPT, OpenTelemetry GenAI spans as Langfuse "
        "or Phoenix export them); default: the run's recording (trajkit model serve --record).",
    )
    format: Format = Field("auto", description="The trace file's format (auto: from its first record).")
    tasks: str | None = Field(
        None, description="Tasks whose verifiers attach to the traces' tasks: question or task_id, and verifier."
    )
    sandbox: Unhashed[SandboxKind] = Field("local", description=SANDBOX_HELP)
    workers: Unhashed[int | None] = Field(None, ge=1, description="Sandbox workers (default: CPUs).")


def verifiers_by_task(path: str, questions: dict[str, str | None]) -> tuple[dict[str, dict[str, str]], int]:
    """The verifier of each traced task a task file names (by ``task_id`` or exact ``question``), and how many
    of the file's records name no traced task."""
    from trajkit.curate.files import read_records
    from trajkit.verify import VERIFIERS, check_custom_verifiers

    by_question = {q: tid for tid, q in questions.items() if q is not None}
    out: dict[str, dict[str, str]] = {}
    unknown = 0
    for i, rec in enumerate(read_records(path), 1):
        where = f"{path} record {i}"
        verifier = rec.get("verifier")
        if not isinstance(verifier, dict) or verifier.get("kind") not in VERIFIERS:
            raise UserError(f"{where}: 'verifier' is not {{kind, spec}} with kind one of {', '.join(VERIFIERS)}")
        if "task_id" not in rec and not isinstance(rec.get("question"), str):
            raise UserError(f"{where}: needs a question or a task_id")
        spec = verifier.get("spec")
        verifier = {"kind": verifier["kind"], "spec": spec if isinstance(spec, str) else json.dumps(spec or {})}
        tid = rec.get("task_id") if rec.get("task_id") in questions else by_question.get(rec.get("question"))
        if tid is None:
            unknown += 1
            continue
        if tid in out:
            raise UserError(f"{where}: a second verifier for task {tid} (question {questions[tid]!r:.60})")
        out[tid] = verifier
    check_custom_verifiers(out.values())
    return out, unknown


async def run_traces(ctx: StageContext, cfg: TracesConfig) -> dict[str, Any]:
    from trajkit.models.calllog import log_path

    # what it reads, versioned before it is read: a recording that grows afterwards makes this stage stale
    ctx.store.note_input(Path(cfg.path) if cfg.path is not None else log_path(ctx.store.root))
    if cfg.path is not None:
        calls, fmt = file_calls(Path(cfg.path), cfg.format)
        source, backend, skipped = "imported", None, {}
    else:
        calls, skipped = recorded_calls(ctx.store.root)
        source, backend, fmt = "recorded", "openai", "recording"
        if skipped:
            ctx.log(
                f"{skipped['unreadable_request']} recorded request(s) are no chat conversation; the first: "
                f"{skipped['first_unreadable']}"
            )
    threads, ambiguous = group(calls)
    questions = {task_id(question(t)): question(t) for t in threads}
    verifiers, unknown = verifiers_by_task(cfg.tasks, questions) if cfg.tasks else ({}, 0)
    rows = [trajectory_row(t, content_id(source, t.calls[0].id), source, backend) for t in threads]
    todo, have_tasks = ctx.todo(rows, "trajectories", key="traj_id"), ctx.store.ids("tasks")
    tasks = {}
    for thread, row in zip(threads, rows):
        tid = row["task_id"]
        if tid not in have_tasks and tid not in tasks and ctx.mine(tid):
            tasks[tid] = task_row(tid, question(thread), source, verifiers.get(tid))
    to_verify = [
        (r, {"task_id": r["task_id"], "verifier": verifiers[r["task_id"]]}) for r in todo if r["task_id"] in verifiers
    ]
    if to_verify:
        await _verdicts(ctx, to_verify, cfg)
    ctx.write("tasks", list(tasks.values()))
    with ctx.progress(len(todo), "trajectories") as advance:
        for start in range(0, len(todo), 1000):
            ctx.write("trajectories", todo[start : start + 1000])
            advance(len(todo[start : start + 1000]))
    if source == "recorded":
        mine = [c for t, r in zip(threads, rows) if ctx.mine(r["traj_id"]) for c in t.calls]
        ctx.counts["cached_calls"] = keep_for_replay(ctx, mine)
    ctx.counts.update({"calls": len(calls), "ambiguous": ambiguous})
    if skipped:
        ctx.counts["skipped.unreadable_request"] = skipped["unreadable_request"]
    if unknown:
        ctx.counts["skipped.unknown_task"] = unknown
    ctx.log(
        f"{len(calls)} calls ({fmt}) -> {len(threads)} trajectories of {len(questions)} tasks"
        + (f"; {ambiguous} call(s) matched two trajectories and started their own" if ambiguous else "")
    )
    return {"calls": len(calls), "trajectories": len(threads), "ambiguous": ambiguous, "format": fmt}


def task_row(tid: str, text: str | None, source: str, verifier: dict[str, str] | None) -> dict[str, Any]:
    """A traced task: its question, and the verifier a task file attached (or none)."""
    return {
        "task_id": tid,
        "source_id": None,
        "source": source,
        "question": text,
        "mode": "trace",
        "verifier": verifier,
        "metadata": None,
        "raw_output": None,
    }


async def _verdicts(ctx: StageContext, rows: list[tuple[dict[str, Any], dict[str, Any]]], cfg: TracesConfig) -> None:
    """Set each row's ``verdict`` from its task's verifier (code in the sandbox, where the kind runs code)."""
    from trajkit.envs.solve import trajectory_verdict
    from trajkit.verify import SANDBOXED_KINDS, make_sandbox

    async def judge_all(sandbox: Any) -> None:
        verdicts = await asyncio.gather(*(trajectory_verdict(task, row, sandbox) for row, task in rows))
        for (row, _), verdict in zip(rows, verdicts):
            row["verdict"] = verdict

    if any(task["verifier"]["kind"] in SANDBOXED_KINDS for _, task in rows):
        with make_sandbox(cfg.sandbox, cfg.workers, ctx.share) as sandbox:
            await judge_all(sandbox)
    else:
        await judge_all(None)


def keep_for_replay(ctx: StageContext, calls: list[Call]) -> int:
    """Put each answered recorded call into the run's call cache under the key ``model serve --replay`` looks
    the same request up by; returns how many."""
    from trajkit.models.cache import CallCache, call_key, model_identity
    from trajkit.models.replay import request_call

    cache = CallCache(ctx.store.root / "_cache", ctx.store.redactor)  # the stage's, as its rows
    n = 0
    try:
        for call in calls:
            if call.status != "ok" or not call.completions:
                continue
            model, messages, params, spec = request_call(call.request)
            identity = model_identity(model)
            cache.put(
                call_key(identity, messages, call.request.get("tools"), params, spec), model, call.completions, identity
            )
            n += 1
    finally:
        cache.close()
    return n


TRACES = StageSpec(
    "curate.traces",
    TracesConfig,
    run_traces,
    inputs=(),
    outputs=("tasks", "trajectories"),
    help="Turn the run's recording (`trajkit model serve --record`), or a trace file, into tasks and trajectories.",
)
