"""curate.filter: rule filters, the zero-variance filter over samples, custom filters by dotted path."""

from __future__ import annotations

import pytest

from tests.curate.helpers import run, task
from trajkit.curate.filters import difficulty_in, has_verifier, max_chars, min_chars, zero_variance
from trajkit.errors import UserError
from trajkit.schema import content_id
from trajkit.store import Store


def _sample(tid: str, i: int, verdict: str, model: str = "m") -> dict:
    return {
        "sample_id": content_id(tid, model, i),
        "task_id": tid,
        "sample_index": i,
        "model": model,
        "verdict": verdict,
        "score": 1.0 if verdict == "pass" else 0.0,
    }


def test_rule_functions_return_keep_or_a_reason():
    assert min_chars(5)({"question": " ab "}) == "too_short" and min_chars(2)({"question": "abc"}) is None
    assert max_chars(3)({"question": "abcd"}) == "too_long"
    assert has_verifier({"verifier": {"kind": "none", "spec": "{}"}}) == "no_verifier"
    assert has_verifier({"verifier": {"kind": "math", "spec": "{}"}}) is None
    assert difficulty_in(["hard"])({"difficulty": "easy"}) == "difficulty"
    assert difficulty_in(["hard"])({"difficulty": None}) == "no_difficulty"
    assert zero_variance({"scores": [1.0, 1.0]}) == zero_variance({"scores": [0.0, None]}) == "zero_variance"
    assert zero_variance({"scores": [1.0, 0.0]}) is None and zero_variance({"scores": []}) is None
    # an error verdict (an attempt or verifier that failed) judged nothing: it is no evidence of variance
    passed_and_errors = {"scores": [1.0, 1.0, 0.0], "verdicts": ["pass", "pass", "error"]}
    assert zero_variance(passed_and_errors) == "zero_variance"
    assert zero_variance({"scores": [1.0, 0.0], "verdicts": ["pass", "fail"]}) is None
    assert zero_variance({"scores": [0.0, 0.0], "verdicts": ["error", "error"]}) is None  # nothing judged: kept


@pytest.fixture
def filled(run_dir):
    """A store with four tasks and their samples, and the task ids by name."""
    s = Store(run_dir)
    tasks = [
        task("all_pass", "Sort a list of numbers."),
        task("mixed", "Reverse a string s."),
        task("all_fail", "Prove P != NP."),
        task("unsampled", "x"),
    ]
    s.write("tasks", "synth", tasks)
    ids = {t["source_id"]: t["task_id"] for t in tasks}
    samples = [_sample(ids["all_pass"], i, "pass") for i in range(3)]
    samples += [_sample(ids["mixed"], 0, "pass"), _sample(ids["mixed"], 1, "timeout")]
    samples += [_sample(ids["all_fail"], i, v) for i, v in enumerate(["fail", "error", "timeout"])]
    samples += [_sample(ids["all_fail"], 9, "pass", model="other")]
    s.write("samples", "passk", samples)
    return s, ids


def test_zero_variance_drops_groups_without_signal(filled):
    store, ids = filled
    m = run(store, "curate.filter", zero_variance=True, model="m")
    rejected = {r["row_id"]: (r["reason"], r["detail"]) for r in store.rows("rejected")}
    assert rejected == {
        ids["all_pass"]: ("zero_variance", "zero_variance"),
        ids["all_fail"]: ("zero_variance", "zero_variance"),
    }
    assert m["summary"] == {"tasks": 4, "kept": 2} and m["counts"]["rejected.zero_variance"] == 2


def test_all_models_count_when_no_model_is_named(filled):
    store, ids = filled
    run(store, "curate.filter", zero_variance=True)
    assert {r["row_id"] for r in store.rows("rejected")} == {ids["all_pass"]}


def test_custom_filter_from_a_dotted_path_runs_after_the_rules(filled):
    store, ids = filled
    run(store, "curate.filter", min_chars=2, custom=["tests.curate.custom_filters:no_lists"])
    rejected = {r["row_id"]: (r["reason"], r["detail"]) for r in store.rows("rejected")}
    assert rejected == {
        ids["all_pass"]: ("mentions_list", "tests.curate.custom_filters:no_lists"),
        ids["unsampled"]: ("too_short", "min_chars"),
    }


def test_filters_skip_tasks_rejected_by_other_stages(filled):
    store, _ = filled
    run(store, "curate.filter", name="first", min_chars=2)
    m = run(store, "curate.filter", name="second", max_chars=20)
    assert m["summary"]["tasks"] == 3
    assert [r["reason"] for r in store.rows("rejected", stage="second")] == ["too_long"]


@pytest.mark.parametrize(
    "custom, message",
    [
        ("tests.curate.custom_filters:broken", "failed on task .*KeyError"),
        ("tests.curate.custom_filters:wrong_type", "returned 3"),
        ("tests.curate.custom_filters:NOT_CALLABLE", "is not callable"),
        ("tests.curate.custom_filters:absent", "has no 'absent'"),
        ("no_such_module_xyz:fn", "cannot import custom filter"),
    ],
)
def test_broken_custom_filters_are_user_errors(filled, custom, message):
    store, _ = filled
    with pytest.raises(UserError, match=message):
        run(store, "curate.filter", custom=[custom])


def test_a_filter_stage_needs_a_rule(filled):
    store, _ = filled
    with pytest.raises(UserError, match="no filter configured"):
        run(store, "curate.filter")
