"""Answer verifiers: math answers (math-verify, in the sandbox) and tool-task outcome checks."""

from __future__ import annotations

import json
import math
import re

from trajkit.verify.extract import strip_reasoning
from trajkit.verify.result import Result
from trajkit.verify.specs import MathSpec, ToolOutcomeSpec

# Runs in the sandbox: sympy parsing of model output can hang or blow up, and
# math-verify's own timeouts need the main thread of a process of their own.
MATH_PROGRAM = """
import json, sys
from math_verify import parse, verify
data = json.load(sys.stdin)
answer = data["answer"]
gold = parse(answer if ("$" in answer or "\\\\boxed" in answer) else "$" + answer + "$") or parse(answer)
pred = parse(data["completion"])
print(json.dumps({"gold": [str(g) for g in gold], "pred": [str(p) for p in pred],
                  "equal": bool(gold and pred and verify(gold, pred))}))
"""


def math_answer(spec: MathSpec, completion: str, context: dict, sandbox) -> Result:
    """Extract the final answer from the completion (its reasoning dropped) and compare it with ``answer``
    symbolically."""
    stdin = json.dumps({"answer": spec.answer, "completion": strip_reasoning(completion)})
    run = sandbox.run(MATH_PROGRAM, stdin=stdin, timeout_s=spec.timeout_s, memory_mb=2048, preload=("math_verify",))
    if run.verdict in ("timeout", "memory"):
        return Result(0.0, run.verdict, {"reason": run.reason}, run.runtime_s, run.tail())
    if run.verdict != "pass":
        return Result(0.0, "error", {"reason": f"math-verify failed: {run.reason}"}, run.runtime_s, run.tail())
    try:
        out = json.loads(run.stdout)
    except json.JSONDecodeError:
        return Result(0.0, "error", {"reason": "math-verify printed no result"}, run.runtime_s, run.tail())
    details = {"gold": out["gold"], "extracted": out["pred"]}
    if not out["gold"]:
        return Result(0.0, "error", {**details, "reason": f"cannot parse the reference answer {spec.answer!r}"})
    if out["equal"]:
        return Result(1.0, "pass", details, run.runtime_s)
    reason = "no answer found in the completion" if not out["pred"] else "answer differs from the reference"
    return Result(0.0, "fail", {**details, "reason": reason}, run.runtime_s)


def tool_outcome(spec: ToolOutcomeSpec, completion: str, context: dict, sandbox=None) -> Result:
    """Check the agent's final answer (its reasoning dropped) and the server's end state; score = share of
    checks passed.

    ``context["end_state"]`` holds the observed outputs of ``spec.state``'s
    probes, in order (the agent loop runs them at the end of the episode). Which
    tools the agent called does not count: only what it achieved.
    """
    checks = []
    if spec.answer is not None:
        ok, reason = matches(strip_reasoning(completion), spec.answer, spec.answer_match)
        checks.append({"check": "answer", "passed": ok, "reason": reason})
    observed = context.get("end_state")
    for i, probe in enumerate(spec.state):
        name = f"state[{i}] {probe.server}.{probe.tool}"
        if observed is None:
            ok, reason = False, "no end_state in the context: the probes were not run"
        elif i >= len(observed) or observed[i] is None:
            ok, reason = False, "this probe has no observed output"
        else:
            ok, reason = matches(str(observed[i]), probe.expected, probe.match)
        checks.append({"check": name, "passed": ok, "reason": reason})
    if not checks:
        return Result.error("tool_outcome spec has neither an answer nor state probes: nothing to check")
    passed = sum(c["passed"] for c in checks)
    details = {"passed": passed, "total": len(checks), "checks": checks}
    if passed < len(checks):
        details["reason"] = "; ".join(f"{c['check']}: {c['reason']}" for c in checks if not c["passed"])
    return Result(passed / len(checks), "pass" if passed == len(checks) else "fail", details)


_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")


def matches(observed: str, expected: str, how: str) -> tuple[bool, str]:
    """Compare an observed text with the expected one; returns (matched, why not).

    exact: equal after trimming and collapsing whitespace; contains: the
    expected text occurs in the observed one, ignoring case and whitespace
    runs; number: some number in the observed text equals the expected number
    (relative tolerance 1e-6, thousands separators allowed); regex: ``re.search``.
    """
    norm_obs, norm_exp = " ".join(observed.split()), " ".join(expected.split())
    if how == "exact":
        return norm_obs == norm_exp, f"expected exactly {expected!r}"
    if how == "contains":
        return norm_exp.casefold() in norm_obs.casefold(), f"{expected!r} not found"
    if how == "number":
        target = _to_number(expected)
        if target is None:
            return False, f"expected value {expected!r} is not a number"
        found = [_to_number(m) for m in _NUMBER.findall(observed)]
        hit = any(v is not None and math.isclose(v, target, rel_tol=1e-6, abs_tol=1e-9) for v in found)
        return hit, f"no number equal to {expected} found"
    if how == "regex":
        try:
            return re.search(expected, observed, re.DOTALL) is not None, f"pattern {expected!r} not found"
        except re.error as exc:
            return False, f"invalid pattern {expected!r}: {exc}"
    return False, f"unknown match mode {how!r}"


def _to_number(text: str) -> float | None:
    try:
        return float(text.replace(",", "").strip())
    except ValueError:
        return None
