"""The ``eval.tools`` stage: tool-call accuracy, BFCL-style, on held-out trajectories or BFCL's AST categories.

Trajectories: each held-out trajectory is replayed up to each assistant turn;
the model is asked for that turn with the tools the trajectory offered, and
its calls are scored against the reference turn (``toolcall.score_calls``):
name, required arguments, types and values, parallel calls as a set. Turns
without tool calls (the final answer) check abstention. BFCL: the entries of
the given categories from the ``bfcl-eval`` wheel, scored the same way, with
BFCL's own ``ast_checker`` run on the same predictions for comparison.

One ``eval_tools`` row per (model, turn), flushed every ``flush_rows`` rows;
a failed model request (a transient failure) is a row with ``correct`` null,
the reason ``model_error: ...`` and the reason code ``model_error``; the next
run of the stage (a resume) drops this rank's rows of that code and asks again,
as every stage retries its transient failures. The breakdown per server and per tool lands in the
manifest.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import Field, model_validator

from trajkit import schema as S
from trajkit.config import StageConfig, Unhashed
from trajkit.errors import StageStopped, UserError
from trajkit.eval import bfcl
from trajkit.eval.report import tools_report
from trajkit.eval.toolcall import Call, Expected, Verdict, expected_from_reference, parse_arguments, score_calls
from trajkit.models.base import Completion, ModelSpec
from trajkit.runner import StageContext, StageSpec
from trajkit.store import Store

DETAIL_CHARS = 300
MODEL_ERROR = "model_error"  # the reason code of a turn whose model request failed: retried on resume


class EvalToolsConfig(StageConfig):
    models: list[ModelSpec] = Field(min_length=1, description="One model, or several compared side by side.")
    split: str | None = Field("held_out", description="Trajectories of tasks in this split; null for all.")
    statuses: list[str] = Field(default_factory=lambda: ["completed"], description="Trajectory statuses replayed.")
    abstention: bool = Field(True, description="Also score turns without tool calls: the model should not call one.")
    bfcl: list[str] = Field(
        default_factory=list,
        description="BFCL categories (simple, multiple, parallel, ..., live, all) instead of trajectories.",
    )
    limit: int | None = Field(None, ge=1, description="Only the first N trajectories (or entries per BFCL category).")
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 512
    seed: int = Field(0, description="Sampling seed of every request (one request per replayed turn).")
    concurrency: Unhashed[int] = Field(16, ge=1, description="Requests in flight.")
    flush_rows: Unhashed[int] = Field(64, ge=1, description="Rows per written shard.")

    @model_validator(mode="after")
    def _check(self) -> EvalToolsConfig:
        names = [m.model for m in self.models]
        if len(set(names)) != len(names):
            raise ValueError(f"models must have distinct names; got {names}")
        if self.split is not None and self.split not in S.SPLITS:
            raise ValueError(f"split must be one of {', '.join(S.SPLITS)}, or null for every task (--set split=null)")
        bad = [s for s in self.statuses if s not in S.TRAJ_STATUS]
        if bad:
            raise ValueError(f"unknown status(es) {bad}; known: {', '.join(S.TRAJ_STATUS)}")
        return self


@dataclass
class Turn:
    """One model call to score: the conversation so far, the tools offered, what the reference did."""

    traj_id: str
    turn: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    server: str | None
    expected_json: str | None
    score: Callable[[list[Call], int], Verdict]  # (readable calls, unreadable count) -> verdict


def eval_id(spec: ModelSpec, t: Turn, cfg: EvalToolsConfig) -> str:
    return S.content_id(
        "eval.tools", spec.model, spec.backend, t.traj_id, t.turn, cfg.temperature, cfg.top_p, cfg.max_tokens, cfg.seed
    )


def score_turn(expected: list[Expected], schemas: dict[str, dict], calls: list[Call], malformed: int) -> Verdict:
    """Score a replayed turn; a call the model wrote that cannot be read is wrong, whatever was expected."""
    if malformed:
        return Verdict(False, False, None, "malformed_call", f"{malformed} call(s) without JSON object arguments")
    return score_calls(calls, expected, schemas)


def trajectory_turns(store: Store, cfg: EvalToolsConfig, counts: Any) -> list[Turn]:
    """The turns to replay, from the split's trajectories (by trajectory id)."""
    where = ["list_contains(?::VARCHAR[], t.status)", "t.reject_reason IS NULL"]
    params: list[Any] = [cfg.statuses]
    if cfg.split:
        where.append("k.split = ?")
        params.append(cfg.split)
    query = (
        "SELECT t.traj_id, t.tools, t.messages FROM trajectories t JOIN tasks k ON k.task_id = t.task_id "
        f"WHERE {' AND '.join(where)} ORDER BY t.traj_id" + (f" LIMIT {int(cfg.limit)}" if cfg.limit else "")
    )
    con = store.duckdb()
    try:
        rows = con.sql(query, params=params).to_arrow_table().to_pylist()
    finally:
        con.close()
    if not rows:
        what = f"tasks of split {cfg.split!r}" if cfg.split else "the run"
        raise UserError(f"no {'/'.join(cfg.statuses)} trajectories for {what} in {store.root}")
    return [t for row in rows for t in _turns(row, cfg.abstention, counts)]


def _turns(row: dict[str, Any], abstention: bool, counts: Any) -> Iterator[Turn]:
    offered = row["tools"] or []
    schemas = {t["name"]: json.loads(t["input_schema"] or "{}") for t in offered}
    tools = [
        {
            "type": "function",
            "function": {"name": t["name"], "description": t["description"] or "", "parameters": schemas[t["name"]]},
        }
        for t in offered
    ]
    server_of = {t["name"]: t["server"] for t in offered}
    messages = [{k: v for k, v in m.items() if v is not None} for m in row["messages"] or []]
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        calls = m.get("tool_calls") or []
        if not calls and not abstention:
            continue
        reference = [(c["name"], parse_arguments(c["arguments"])) for c in calls]
        if any(args is None for _, args in reference):
            counts["skipped.unreadable_reference_call"] += 1
            continue
        expected = [Expected(name, expected_from_reference(args, schemas.get(name) or {})) for name, args in reference]
        yield Turn(
            row["traj_id"],
            i,
            messages[:i],
            tools,
            server_of.get(reference[0][0]) if reference else None,
            json.dumps([{"name": n, "arguments": a} for n, a in reference], ensure_ascii=False),
            lambda got, bad, e=expected, s=schemas: score_turn(e, s, got, bad),
        )


def bfcl_turns(cfg: EvalToolsConfig) -> list[Turn]:
    out = []
    for category in bfcl.resolve(cfg.bfcl):
        for entry in bfcl.load(category, cfg.limit):
            if entry.expected is not None:
                expected: list[dict[str, Any]] | None = [{"name": e.name, "accept": e.accept} for e in entry.expected]
            else:  # irrelevance: no call expected; relevance: any call
                expected = None if category == "live_relevance" else []
            out.append(
                Turn(
                    entry.id,
                    0,
                    entry.messages,
                    entry.tools(),
                    f"bfcl/{category}",
                    json.dumps(expected),
                    lambda got, bad, e=entry: bfcl.score(e, got, bad),
                )
            )
    return out


def read_calls(c: Completion) -> tuple[list[Call], int, list[dict[str, Any]]]:
    """A completion's calls: the readable ones, how many were not, and all of them as stored.

    The backend sets aside calls to unknown tools or with arguments that
    violate the tool's schema (``tool_call_errors``, raw text kept); those are
    still calls with a name and arguments, so they are recovered and scored
    (a wrong name, a type error), not counted as unreadable.
    """
    calls, malformed, stored = [], 0, []
    for tc in c.tool_calls:
        args = parse_arguments(tc.arguments)
        if args is None:
            malformed += 1
            stored.append({"name": tc.name, "arguments": tc.arguments})
        else:
            calls.append(Call(tc.name, args))
            stored.append({"name": tc.name, "arguments": args})
    for err in c.tool_call_errors:
        recovered = _recover(err.raw)
        if recovered is None:
            malformed += 1
            stored.append({"name": None, "raw": err.raw, "error": err.reason})
        else:
            calls.append(recovered)
            stored.append({"name": recovered.name, "arguments": recovered.arguments})
    return calls, malformed, stored


def _recover(raw: str) -> Call | None:
    """A call from a backend's raw text: an OpenAI ``tool_calls`` entry or a ``<tool_call>`` block."""
    text = raw.strip().removeprefix("<tool_call>").removesuffix("</tool_call>").strip()
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    fn = obj.get("function") if isinstance(obj, dict) and isinstance(obj.get("function"), dict) else obj
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        return None
    args = fn.get("arguments", fn.get("parameters"))
    args = parse_arguments(args) if isinstance(args, str) else args
    return Call(fn["name"], args) if isinstance(args, dict) else None


def retry_model_errors(ctx: StageContext, _: EvalToolsConfig) -> int:
    """Drop this rank's rows whose model request failed (by their reason code, never their reason's text,
    which quotes the model), so those turns are asked again."""
    from trajkit.envs.agent import is_transient

    data = ctx.store.read("eval_tools", ["eval_id", "reason_code"], stage=ctx.name).to_pylist()
    again = {r["eval_id"] for r in data if is_transient(r["reason_code"]) and ctx.mine(r["eval_id"])}
    return ctx.store.drop_rows("eval_tools", ctx.name, again)


async def run_eval_tools(ctx: StageContext, cfg: EvalToolsConfig) -> dict[str, Any]:
    turns = bfcl_turns(cfg) if cfg.bfcl else trajectory_turns(ctx.store, cfg, ctx.counts)
    todo = ctx.todo([(m, t) for m in cfg.models for t in turns], "eval_tools", key=lambda u: eval_id(*u, cfg))
    ctx.log(f"{len(turns)} turn(s) x {len(cfg.models)} model(s), {len(todo)} to evaluate")
    if todo:
        await _evaluate(ctx, cfg, todo)
    ctx.flush()
    return summarize(ctx, cfg)


def summarize(ctx: StageContext, cfg: EvalToolsConfig) -> dict[str, Any]:
    """The stage's report over every shard's rows: per model, tool and server (and BFCL's checker)."""
    rows = ctx.store.rows("eval_tools", stage=ctx.name)
    models = [m.model for m in cfg.models]
    summary: dict[str, Any] = {
        "source": "bfcl" if cfg.bfcl else "trajectories",
        "split": None if cfg.bfcl else cfg.split,
        "models": tools_report(rows, models),
    }
    if cfg.bfcl:
        summary["bfcl_version"] = bfcl.version()
        summary["bfcl_checker"] = compare_with_bfcl(rows, bfcl.resolve(cfg.bfcl), cfg.limit, models)
    return summary


async def _evaluate(ctx: StageContext, cfg: EvalToolsConfig, todo: list[tuple[ModelSpec, Turn]]) -> None:
    from trajkit.models.base import SamplingParams

    params = SamplingParams(n=1, temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens, seed=cfg.seed)
    backends = {m.model: ctx.backend(m) for m in cfg.models}

    async def one(spec: ModelSpec, t: Turn) -> dict[str, Any]:
        try:
            completions = await backends[spec.model].generate(t.messages, t.tools or None, params)
            c = completions[0] if completions else Completion(text="", error="no completion")
        except (StageStopped, UserError):  # a budget cap or a bad config stops the stage
            raise
        except Exception as e:  # noqa: BLE001 - a backend fault is this turn's row, not the run's end
            c = Completion(text="", finish_reason="error", error=f"{type(e).__name__}: {e}")
        row = {
            "eval_id": eval_id(spec, t, cfg),
            "model": spec.model,
            "traj_id": t.traj_id,
            "turn": t.turn,
            "server": t.server,
            "expected": t.expected_json,
        }
        if c.error:
            ctx.counts[MODEL_ERROR] += 1
            return {
                **row,
                "predicted": None,
                "reason": f"{MODEL_ERROR}: {c.error}"[:DETAIL_CHARS],
                "reason_code": MODEL_ERROR,
            }
        calls, malformed, stored = read_calls(c)
        verdict = t.score(calls, malformed)
        ctx.counts["correct" if verdict.correct else "wrong"] += 1
        reason = (
            None
            if verdict.reason is None
            else (verdict.reason + (f": {verdict.detail}" if verdict.detail else ""))[:DETAIL_CHARS]
        )
        return {
            **row,
            "predicted": json.dumps(stored, ensure_ascii=False),
            "name_correct": verdict.name_correct,
            "args_correct": verdict.args_correct,
            "correct": verdict.correct,
            "reason": reason,
        }

    try:
        await ctx.fan_out(
            todo,
            lambda item: one(*item),
            concurrency=cfg.concurrency,
            unit="turns",
            write=lambda _, row: ctx.write("eval_tools", row),
            flush=(cfg.flush_rows, ("eval_tools",)),
        )
    finally:
        for backend in backends.values():
            await backend.aclose()


def compare_with_bfcl(
    rows: list[dict[str, Any]], categories: list[str], limit: int | None, models: list[str]
) -> list[dict[str, Any]]:
    """Per model and AST category: trajkit's accuracy and BFCL's ``ast_checker``'s on the same stored predictions."""
    check = bfcl.official_checker()
    out = []
    for category in [c for c in categories if c in bfcl.AST_CATEGORIES]:
        entries = {e.id: e for e in bfcl.load(category, limit)}
        for model in models:
            mine = [
                r
                for r in rows
                if r["model"] == model and r["server"] == f"bfcl/{category}" and r["correct"] is not None
            ]
            if not mine:
                continue
            ours, theirs = [], []
            for r in mine:
                stored = json.loads(r["predicted"])
                readable = all(c.get("name") is not None and isinstance(c.get("arguments"), dict) for c in stored)
                calls = [Call(c["name"], c["arguments"]) for c in stored]
                ours.append(bool(r["correct"]))
                theirs.append(readable and check(entries[r["traj_id"]], calls))  # BFCL cannot decode unreadable calls
            out.append(
                {
                    "model": model,
                    "category": category,
                    "entries": len(mine),
                    "trajkit": sum(ours) / len(ours),
                    "bfcl": sum(theirs) / len(theirs),
                    "disagree": sum(a != b for a, b in zip(ours, theirs)),
                }
            )
    return out


EVAL_TOOLS = StageSpec(
    "eval.tools",
    EvalToolsConfig,
    run_eval_tools,
    retry=retry_model_errors,
    report=summarize,
    inputs=("trajectories", "tasks", "splits"),
    outputs=("eval_tools",),
    help="Tool-call accuracy (BFCL-style) on held-out trajectories, or on BFCL's AST categories, per tool and per server (eval_tools).",
)
