"""Code verifiers: unit tests (HumanEval/MBPP style) and stdin/stdout cases, run in the sandbox."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from trajkit.verify.extract import extract_code, unit_test_parts
from trajkit.verify.result import Result, RunResult
from trajkit.verify.specs import StdioSpec, UnitTestsSpec, output_lines

# When cases end differently, the task's verdict is the most telling one.
_PRECEDENCE = ("error", "memory", "timeout", "fail")


def unit_tests(spec: UnitTestsSpec, completion: str, context: dict, sandbox) -> Result:
    """Run prompt + completion against the tests; pass only if the tests ran to their end without an error.

    The tests run in their own process, out of the solution's reach (``extract.unit_test_parts``).
    """
    solution, tests, names = unit_test_parts(completion, spec.test, spec.prompt, spec.entry_point)
    tests_part = {"program": tests, "names": names}
    run = sandbox.run(solution, timeout_s=spec.timeout_s, memory_mb=spec.memory_mb, tests=tests_part)
    passed = run.verdict == "pass" and run.finished
    verdict = "pass" if passed else ("fail" if run.verdict == "pass" else run.verdict)
    details = {"reason": "" if passed else run.reason or "tests failed", "exception": run.exception}
    if run.exit_code is not None:
        details["exit_code"] = run.exit_code
    return Result(float(passed), verdict, details, run.runtime_s, run.tail())


def stdio(spec: StdioSpec, completion: str, context: dict, sandbox) -> Result:
    """Run the program once per case; the score is the share of cases whose output matches.

    Outputs are compared line by line, with only the ASCII whitespace at line ends and the
    empty lines at the end left out (``specs.output_lines``).
    """
    program = extract_code(completion)

    def one(case) -> RunResult:
        return sandbox.run(program, stdin=case.input, timeout_s=spec.timeout_s, memory_mb=spec.memory_mb)

    with ThreadPoolExecutor(max_workers=min(len(spec.cases), getattr(sandbox, "workers", 1))) as pool:
        runs = list(pool.map(one, spec.cases))
    cases, tail = [], ""
    for i, (case, run) in enumerate(zip(spec.cases, runs)):
        if run.verdict != "pass":
            verdict, reason = run.verdict, run.reason
        elif output_lines(run.stdout) != output_lines(case.output):
            verdict, reason = "fail", "wrong output"
        else:
            verdict, reason = "pass", ""
        cases.append({"case": i, "verdict": verdict, "reason": reason, "runtime_s": run.runtime_s})
        if verdict != "pass" and not tail:
            tail = run.tail()
    passed = sum(c["verdict"] == "pass" for c in cases)
    verdicts = {c["verdict"] for c in cases}
    verdict = "pass" if passed == len(cases) else next(v for v in _PRECEDENCE if v in verdicts)
    details = {"passed": passed, "total": len(cases), "cases": cases}
    if verdict != "pass":
        details["reason"] = f"{len(cases) - passed} of {len(cases)} cases failed"
    return Result(passed / len(cases), verdict, details, sum(r.runtime_s for r in runs), tail or runs[-1].tail())
