"""Answer verifiers: math answers (math-verify, in the sandbox) and tool-task outcome checks."""

from __future__ import annotations

import json

from trajkit.verify.extract import strip_reasoning
from trajkit.verify.matching import answer_matches, state_matches
from trajkit.verify.result import Result
from trajkit.verify.specs import MathSpec, ToolOutcomeSpec

# Runs in the sandbox: sympy parsing of model output can hang or blow up, and
# math-verify's own timeouts need the main thread of a process of their own.
# Two rules on top of math-verify's: a percent is a percent (latex2sympy keeps "50\%"
# as 50*UnevaluatedExpr(1/100), which math-verify lets equal 50: it is made 1/2, and the
# text fallbacks that dropped the % are used only where no expression was parsed), and
# an answer that states a false relation between numbers ("3 = 5", "x = 1+1 = 3") fails
# (math-verify would compare only its right-hand side).
MATH_PROGRAM = """
import json, sys
from math_verify import parse, verify
from math_verify.grader import sympy_expr_eq
from sympy import And, Basic, Eq, Rational, UnevaluatedExpr
from sympy.core.relational import Relational

PERCENT = {UnevaluatedExpr(Rational(1, 100)): Rational(1, 100)}

def read(found):
    parsed = [p.xreplace(PERCENT) if isinstance(p, Basic) else p for p in found]
    return [p for p in parsed if isinstance(p, Basic)] or parsed

def relations(e):
    if isinstance(e, And):
        for a in e.args:
            yield from relations(a)
    elif isinstance(e, Relational):
        yield e

def false_relation(found):
    for e in found:
        for r in relations(e) if isinstance(e, Basic) else ():
            if r.lhs.free_symbols or r.rhs.free_symbols:
                continue
            try:
                holds = sympy_expr_eq(r.lhs, r.rhs, 6, 15) if isinstance(r, Eq) else bool(r.func(r.lhs.doit(), r.rhs.doit()))
            except Exception:
                continue
            if not holds:
                return str(r)
    return None

data = json.load(sys.stdin)
answer = data["answer"]
gold = read(parse(answer if ("$" in answer or "\\\\boxed" in answer) else "$" + answer + "$") or parse(answer))
pred = read(parse(data["completion"]))
false = false_relation(pred)
print(json.dumps({"gold": [str(g) for g in gold], "pred": [str(p) for p in pred], "false": false,
                  "equal": bool(gold and pred and not false and verify(gold, pred))}))
"""


def math_answer(spec: MathSpec, completion: str, context: dict, sandbox) -> Result:
    """Extract the final answer from the completion (its reasoning dropped) and compare it with ``answer``
    symbolically: a percent is a fraction (``50\\%`` is 1/2), and a false relation (``\\boxed{3 = 5}``) fails."""
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
        return Result(
            1.0, "pass", {**details, "reason": f"the answer {out['pred'][0]} equals {out['gold'][0]}"}, run.runtime_s
        )
    if out["false"]:
        reason = f"the answer states a false relation: {out['false']}"
    elif not out["pred"]:
        reason = "no answer found in the completion"
    else:
        reason = "answer differs from the reference"
    return Result(0.0, "fail", {**details, "reason": reason}, run.runtime_s)


def tool_outcome(spec: ToolOutcomeSpec, completion: str, context: dict, sandbox=None) -> Result:
    """Check the agent's final answer (its ``Answer:`` line, reasoning dropped) and the server's end state;
    score = share of checks passed. The rules are in ``trajkit.verify.matching``.

    ``context["end_state"]`` holds the observed outputs of ``spec.state``'s
    probes, in order (the agent loop runs them at the end of the episode). Which
    tools the agent called does not count: only what it achieved. ``details["reason"]``
    says why the checks passed, or why the failing ones failed.
    """
    checks = []
    if spec.answer is not None:
        ok, reason = answer_matches(strip_reasoning(completion), spec.answer, spec.answer_match)
        checks.append({"check": "answer", "passed": ok, "reason": reason})
    observed = context.get("end_state")
    for i, probe in enumerate(spec.state):
        name = f"state[{i}] {probe.server}.{probe.tool}"
        if observed is None:
            ok, reason = False, "no end_state in the context: the probes were not run"
        elif i >= len(observed) or observed[i] is None:
            ok, reason = False, "this probe has no observed output"
        else:
            ok, reason = state_matches(str(observed[i]), probe.expected, probe.match)
        checks.append({"check": name, "passed": ok, "reason": reason})
    if not checks:
        return Result.error("tool_outcome spec has neither an answer nor state probes: nothing to check")
    passed = sum(c["passed"] for c in checks)
    told = [c for c in checks if not c["passed"]] or checks
    details = {"passed": passed, "total": len(checks), "checks": checks}
    details["reason"] = "; ".join(f"{c['check']}: {c['reason']}" for c in told)
    return Result(passed / len(checks), "pass" if passed == len(checks) else "fail", details)
