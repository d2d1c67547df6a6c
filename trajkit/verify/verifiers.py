"""``verify`` and ``verify_many``: judge completions with a task's verifier, whatever its kind.

A verifier is a tasks row's ``verifier`` column: ``{"kind": ..., "spec": JSON
text or a dict}``. Kinds: ``unit_tests``, ``stdio``, ``math``,
``tool_outcome``, ``custom``, ``judge`` (spec formats in ``specs.py`` and
docs/sandbox.md). Nothing here raises for a bad spec, an unknown kind or a
crashing verifier: the result's verdict is ``error`` and ``details["reason"]``
says why. The one exception is the user's own mistake: a custom verifier whose
dotted path does not import is a ``UserError`` (exit 2), and stages call
``check_custom_verifiers`` on their tasks before any work, so it is reported
once, up front.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from trajkit.errors import UserError
from trajkit.plugins import Verifier
from trajkit.verify.answers import math_answer, tool_outcome
from trajkit.verify.code import stdio, unit_tests
from trajkit.verify.result import Result
from trajkit.verify.sandbox import Sandbox, default_sandbox
from trajkit.verify.specs import CustomSpec, JudgeSpec, SpecError, parse_spec


def custom(spec: CustomSpec, completion: str, context: dict, sandbox) -> Result:
    """Call the user's ``fn(completion, spec, context) -> Result | float | bool`` named by ``spec.path``
    (``trajkit.plugins.Verifier``).

    ``spec`` reaches the function as a dict with every key of the JSON spec. A
    float must lie in [0, 1] and passes at ``pass_threshold`` (default 1.0); a
    bool scores 1 or 0; a Result is returned as it is.
    """
    fn = _custom_function(spec.path)
    return _as_result(fn(completion, spec.model_dump(), context), spec.pass_threshold, f"custom verifier {spec.path}")


def _custom_function(path: str) -> Verifier:
    from trajkit.config import load_object

    fn = load_object(path, "custom verifier")
    if not callable(fn):
        raise UserError(f"custom verifier {path!r} is not callable")
    return fn


def check_custom_verifiers(verifiers: Iterable[Any]) -> None:
    """Import every distinct custom verifier that these verifiers name, once: a path that does not
    resolve is a UserError before any work. (A spec that does not parse is that task's fault: its
    samples get an ``error`` verdict.)"""
    paths = set()
    for v in verifiers:
        if isinstance(v, dict) and v.get("kind") == "custom":
            try:
                paths.add(parse_spec("custom", v.get("spec")).path)
            except SpecError:
                continue
    for path in sorted(paths):
        _custom_function(path)


def judge(spec: JudgeSpec, completion: str, context: dict, sandbox) -> Result:
    """Score with the caller's judge, ``context["judge"]``: ``(completion, spec, context) -> float | None``.

    verify/ never calls a model itself. The judge may return ``(score, raw_text)``
    so that its raw output lands in ``details`` when the score is None (unparsable).
    """
    fn = context.get("judge")
    if not callable(fn):
        return Result.error("judge verifier needs a callable context['judge'](completion, spec, context)")
    out = fn(completion, spec.model_dump(), {k: v for k, v in context.items() if k != "judge"})
    score, raw = out if isinstance(out, tuple) else (out, None)
    if score is None:
        return Result.error("the judge's output could not be parsed into a score", judge_raw=raw)
    result = _as_result(score, spec.pass_threshold, "judge")
    if raw is not None:
        result.details["judge_raw"] = raw
    return result


def _as_result(value: Any, threshold: float, who: str) -> Result:
    if isinstance(value, Result):
        return value
    if isinstance(value, bool):
        return Result(float(value), "pass" if value else "fail")
    if isinstance(value, (int, float)) and 0.0 <= value <= 1.0:
        return Result(float(value), "pass" if value >= threshold else "fail", {"pass_threshold": threshold})
    return Result.error(f"{who} returned {value!r}; expected a Result, a bool or a number in [0, 1]")


VERIFIERS: dict[str, Callable[..., Result]] = {
    "unit_tests": unit_tests,
    "stdio": stdio,
    "math": math_answer,
    "tool_outcome": tool_outcome,
    "custom": custom,
    "judge": judge,
}
SANDBOXED_KINDS = frozenset({"unit_tests", "stdio", "math"})  # the kinds that run code in the sandbox


def verify(verifier: dict, completion: str, context: dict | None = None, sandbox: Sandbox | None = None) -> Result:
    """Judge one completion with a task's verifier; faults become an ``error`` verdict (a custom verifier
    path that does not import raises UserError).

    ``sandbox`` runs code (the process-wide ``default_sandbox()`` when None);
    ``context`` carries what the kind needs beyond the completion
    (``end_state`` for tool_outcome, ``judge`` for judge).
    """
    start = time.monotonic()
    kind = verifier.get("kind") if isinstance(verifier, dict) else None
    try:
        if not isinstance(verifier, dict):
            result = Result.error(f"a verifier is a mapping with 'kind' and 'spec', got {type(verifier).__name__}")
        elif kind == "none":
            result = Result.error("this task has no verifier (kind 'none')")
        elif kind not in VERIFIERS:
            known = ", ".join(VERIFIERS)
            result = Result.error(f"unknown verifier kind {kind!r}; known: {known}")
        else:
            spec = parse_spec(kind, verifier.get("spec"))
            if kind in SANDBOXED_KINDS and sandbox is None:
                sandbox = default_sandbox()
            result = VERIFIERS[kind](spec, completion or "", dict(context or {}), sandbox)
    except SpecError as exc:
        result = Result.error(str(exc))
    except UserError:  # a custom verifier that does not import: the user's to fix, not this sample's verdict
        raise
    except Exception as exc:  # noqa: BLE001 - a crashing verifier (or a user's) judges nothing, and says so
        tb = traceback.format_exc(limit=-5)[-4000:]
        result = Result.error(f"{kind} verifier failed: {type(exc).__name__}: {exc}", traceback=tb)
    if not result.runtime_s:
        result.runtime_s = round(time.monotonic() - start, 4)
    return result


def verify_many(
    items: list[tuple[dict, str, dict | None]], sandbox: Sandbox | None = None, workers: int | None = None
) -> list[Result]:
    """``verify`` each ``(verifier, completion, context)`` in parallel; results in input order.

    ``workers`` threads feed the sandbox (default: two per sandbox worker, so that
    preparing the next program overlaps running the last one).
    """
    if not items:
        return []
    if sandbox is None and any(isinstance(v, dict) and v.get("kind") in SANDBOXED_KINDS for v, _, _ in items):
        sandbox = default_sandbox()
    workers = workers or (2 * sandbox.workers if sandbox is not None else 4)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda item: verify(item[0], item[1], item[2], sandbox), items))
