"""Answers judged as answers: the labelled corpus decides the tool-outcome matcher; probes compare values;
math boxes are judged on meaning (a false relation fails, a percent is a percent)."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from trajkit.verify import verify, verify_many
from trajkit.verify.specs import SpecError, parse_spec

CORPUS = Path(__file__).with_name("answer_corpus.jsonl")


def outcome(spec: dict | str, completion: str, end_state: list | None = None):
    return verify({"kind": "tool_outcome", "spec": spec}, completion, {"end_state": end_state})


def test_the_corpus_decides():
    """tests/verify/answer_corpus.jsonl: no wrong answer passes, 97% of right ones do. Its first 271 lines were
    written before the matcher; the matcher before them passed 75 of their 90 wrong number answers, and 40 of
    their 49 wrong text answers under its default ``contains``. The last 64 were written after a first version,
    which passed 16 of their 34 wrong number answers (bounds such as "over 42", "42 or more", "42ish")."""
    rows = [json.loads(line) for line in CORPUS.read_text().splitlines()]
    assert len(rows) >= 150 and {r["mode"] for r in rows} == {"number", "exact"}
    assert {"hedge", "list", "negation", "embedded", "error_code", "spray"} <= {r["kind"] for r in rows}
    right_kinds = collections.Counter(r["kind"] for r in rows if r["right"])
    assert right_kinds["prose"] >= 10 and right_kinds["answer_line"] >= 20  # plain right answers, with and without
    results = [outcome({"answer": r["target"], "answer_match": r["mode"]}, r["text"]) for r in rows]
    wrong_passed = [
        (r["target"], r["text"][:80]) for r, v in zip(rows, results) if v.verdict == "pass" and not r["right"]
    ]
    assert wrong_passed == []
    right = [(r, v) for r, v in zip(rows, results) if r["right"]]
    missed = [(r["target"], r["text"], v.details["reason"]) for r, v in right if v.verdict != "pass"]
    assert 1 - len(missed) / len(right) >= 0.97, missed


def test_the_stored_reason_says_why_a_check_passed_or_failed():
    spec = {"answer": "195", "answer_match": "number"}
    good = outcome(spec, "Three jackets at 65 dollars each.\nAnswer: 195")
    assert good.verdict == "pass" and good.details["reason"] == "answer: answer line 'Answer: 195' equals 195"
    sprayed = outcome(spec, "Answer: 194, 195, 196")
    assert sprayed.details["reason"] == (
        "answer: answer line 'Answer: 194, 195, 196' holds 3 different numbers (194, 195, 196), not one answer"
    )
    hedged = outcome(spec, "It is probably 195 dollars.")
    assert "last sentence 'It is probably 195 dollars.' is qualified ('probably')" in hedged.details["reason"]
    prose = outcome({"answer": "Paris"}, "I checked the atlas. The capital of France is Paris.")
    assert prose.details["reason"] == (
        "answer: last sentence 'The capital of France is Paris.' ends with 'Paris' after 'The capital of France is'"
    )


def test_a_spec_without_a_mode_is_judged_by_number_or_exact_never_contains():
    assert parse_spec("tool_outcome", '{"answer": "1,250"}').answer_match == "number"
    assert parse_spec("tool_outcome", '{"answer": 42}').answer_match == "number"
    assert parse_spec("tool_outcome", '{"answer": "Paris"}').answer_match == "exact"
    stored = json.dumps({"answer": "Paris", "state": [{"server": "kv", "tool": "get", "expected": "blue"}]})
    assert parse_spec("tool_outcome", stored).state[0].match == "exact"
    assert outcome('{"answer": "Paris"}', "Answer: Paris, London or Rome").verdict == "fail"
    assert outcome('{"answer": "42"}', "Answer: 41 42 43").verdict == "fail"
    # contains stays what it was, for a task that names it: a candidate list passes
    assert outcome({"answer": "Paris", "answer_match": "contains"}, "Answer: Paris, London or Rome").verdict == "pass"
    with pytest.raises(SpecError, match="a number check expects one number, not 'about five'"):
        parse_spec("tool_outcome", {"answer": "about five", "answer_match": "number"})


@pytest.mark.parametrize(
    "expected, match, observed, verdict",
    [
        ("108", None, "41080", "fail"),  # a substring is not the value (the default was contains)
        ("108", "exact", "41080", "fail"),
        ("108", "exact", "108.0", "pass"),
        ("108", "exact", " 108\n", "pass"),
        ("blue", "exact", "blueberry", "fail"),
        ("blue", "exact", "Blue", "fail"),  # a stored value keeps its case
        ('["db_port", "port"]', "exact", '["db_port", "port", "x"]', "fail"),
        ('["db_port", "port"]', "exact", '[ "db_port","port" ]', "pass"),
        ("[{'name': 'books'}]", "exact", "[{'name': 'books'}, {'name': 'logs'}]", "fail"),
        ("[{'name': 'books'}]", "exact", "[{'name': 'books'}]", "pass"),
        ('{"fruit": "apple"}', "exact", '{"fruit": "apple", "veg": "carrot"}', "fail"),
        ("750", "number", "balance: 750", "pass"),
        ("750", "number", "balance: 750 (was 1,250)", "fail"),
        ("750", "number", "[750, 1250]", "fail"),
        ("108", "contains", "41080", "pass"),  # contains, where a task names it, is a substring check
    ],
)
def test_end_state_probes_compare_values(expected, match, observed, verdict):
    probe = {"server": "kv", "tool": "get", "expected": expected} | ({"match": match} if match else {})
    result = outcome({"state": [probe]}, "", [observed])
    assert result.verdict == verdict, result.details


def test_math_boxes_are_judged_on_meaning(sandbox_pool):
    cases = [
        ("5", "\\boxed{3 = 5}", "fail"),  # a false equation passed on its right-hand side
        ("3", "\\boxed{1+1=3}", "fail"),
        ("3", "so $\\boxed{x = 1 + 1 = 3}$", "fail"),  # a chain with a false link
        ("4", "\\boxed{2 + 2 = 4}", "pass"),  # a true one still passes
        ("5", "\\boxed{x = 5}", "pass"),
        ("\\frac{1}{2}", "\\boxed{50\\%}", "pass"),  # a percent is a fraction
        ("50", "\\boxed{50\\%}", "fail"),  # math-verify let 50% equal 50
        ("50", "The answer is 50%.", "fail"),
        ("50\\%", "\\boxed{0.5}", "pass"),
        ("50\\%", "\\boxed{50}", "fail"),
        ("0.125", "\\boxed{12.5\\%}", "pass"),
    ]
    items = [({"kind": "math", "spec": {"answer": gold}}, completion, None) for gold, completion, _ in cases]
    results = verify_many(items, sandbox=sandbox_pool)
    assert [r.verdict for r in results] == [v for _, _, v in cases], [r.details for r in results]
    assert results[0].details["reason"] == "the answer states a false relation: Eq(3, 5)"
    assert results[3].details["reason"] == "the answer Eq(2 + 2, 4) equals 4"


def test_the_agent_is_asked_for_the_answer_line():
    from trajkit.envs.agent import ANSWER_FORMAT, agent_system_prompt
    from trajkit.envs.solve import grpo_rows

    assert "`Answer: <the answer>`" in ANSWER_FORMAT
    assert agent_system_prompt("Be exact.") == f"Be exact.\n\n{ANSWER_FORMAT}"
    tool_task = {"task_id": "t", "question": "What is 2 + 3?", "server_ids": ["calc"], "verifier": None}
    math_task = {"task_id": "m", "question": "What is 2 + 3?", "verifier": {"kind": "math", "spec": '{"answer": "5"}'}}
    tool_row, math_row = grpo_rows([tool_task, math_task], system_prompt="Be exact.")
    assert tool_row["prompt"][0] == {"role": "system", "content": agent_system_prompt("Be exact.")}
    assert math_row["prompt"][0] == {"role": "system", "content": "Be exact."}
