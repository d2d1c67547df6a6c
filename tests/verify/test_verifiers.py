"""The verifiers behind ``verify``: one interface, every kind, and errors that are verdicts, never exceptions."""

from __future__ import annotations

import json

import pytest

from trajkit.errors import UserError
from trajkit.schema import VERDICTS
from trajkit.verify import Result, check_custom_verifiers, verify, verify_many
from trajkit.verify.specs import StdioSpec, output_lines

HUMANEVAL_STYLE = {
    "prompt": 'from typing import List\n\n\ndef total(xs: List[int]) -> int:\n    """Sum of xs."""\n',
    "test": "def check(candidate):\n    assert candidate([1, 2, 3]) == 6\n    assert candidate([]) == 0\n",
    "entry_point": "total",
}


def unit(spec: dict) -> dict:
    return {"kind": "unit_tests", "spec": json.dumps(spec)}


@pytest.mark.parametrize(
    "completion, verdict",
    [
        ("    return sum(xs)\n", "pass"),
        ("Sure!\n```python\ndef total(xs: List[int]) -> int:\n    return sum(xs)\n```\nThis sums the list.", "pass"),
        (
            "```python\ndef total(xs):\n    return sum(xs)\n\nif __name__ == '__main__':\n    print(total([int(input())]))\n```",
            "pass",
        ),
        ("    return sum(xs) + 1\n", "fail"),
        ("    import sys\n    sys.exit(0)\n", "fail"),
        ("    while True:\n        pass\n", "timeout"),
    ],
)
def test_unit_tests_humaneval_style(sandbox_pool, completion, verdict):
    r = verify(unit({**HUMANEVAL_STYLE, "timeout_s": 1}), completion, sandbox=sandbox_pool)
    assert r.verdict == verdict, r
    assert r.score == (1.0 if verdict == "pass" else 0.0)
    assert r.runtime_s > 0


def test_checks_that_every_completion_passes_are_bad_specs():
    for spec in ({"test": ""}, {"test": "# TODO\nimport math\n"}, {**HUMANEVAL_STYLE, "entry_point": None}):
        r = verify(unit(spec), "    return 0\n")
        assert r.verdict == "error" and "runs nothing" in r.details["reason"], r
    silent = {"cases": [{"input": "1", "output": ""}, {"input": "2", "output": "\n"}]}
    assert "prints nothing" in verify({"kind": "stdio", "spec": silent}, "pass").details["reason"]


def test_unit_tests_mbpp_style_and_reasons(sandbox_pool):
    spec = {"test": "assert is_even(4)\nassert not is_even(3)"}
    ok = verify(unit(spec), "def is_even(n):\n    return n % 2 == 0", sandbox=sandbox_pool)
    assert (ok.verdict, ok.score) == ("pass", 1.0)
    bad = verify(unit(spec), "def is_even(n):\n    return True", sandbox=sandbox_pool)
    assert bad.verdict == "fail" and bad.details["exception"].startswith("AssertionError")
    assert "assert not is_even(3)" in bad.output_tail or "AssertionError" in bad.output_tail


def test_stdio_partial_credit(sandbox_pool):
    spec = {
        "cases": [
            {"input": "1 2\n", "output": "3"},
            {"input": "10 20\n", "output": "30\n"},
            {"input": "-1 1", "output": "0"},
            {"input": "2 2", "output": "5"},  # wrong on purpose: no program passes it
        ],
        "timeout_s": 2,
    }
    completion = "```python\na, b = map(int, input().split())\nprint(a + b, ' ')\n```"
    r = verify({"kind": "stdio", "spec": spec}, completion, sandbox=sandbox_pool)
    assert (r.verdict, r.score) == ("fail", 0.75)
    assert [c["verdict"] for c in r.details["cases"]] == ["pass", "pass", "pass", "fail"]
    assert r.details["cases"][3]["reason"] == "wrong output"
    loops = verify({"kind": "stdio", "spec": {**spec, "timeout_s": 0.5}}, "while True: pass", sandbox=sandbox_pool)
    assert (loops.verdict, loops.score) == ("timeout", 0.0)


def test_stdio_normalizes_only_ascii_whitespace_at_line_ends_and_trailing_empty_lines(sandbox_pool):
    """What docs/schema.md says, both ways: a line's trailing ASCII whitespace (CRLF included) and the empty lines
    at the end do not matter; anything else does, Unicode spaces and separators above all (Python's own
    ``split`` and ``splitlines`` take a no-break space, \\x1c or \\u2028 for whitespace)."""
    same = ["1 2\n3", "1 2 \r\n3\t\n", "1 2\n3\n\n\n", "1 2\x0b\x0c\n3 \n \n"]
    different = [
        "1\xa02\n3", "1\x1c2\n3", "1\u20032\n3", "1 2\u20283", "1 2\x853", "1 2\n\n3", "1  2\n3", " 1 2\n3",
        "1\n2\n3", "1 2 3", "1 2\n3\xa0",
    ]  # fmt: skip
    cases = [{"input": repr(text), "output": "1 2\n3\n"} for text in same + different]
    spec = {"cases": cases, "timeout_s": 5}
    r = verify({"kind": "stdio", "spec": spec}, "import sys\nsys.stdout.write(eval(input()))", sandbox=sandbox_pool)
    verdicts = [c["verdict"] for c in r.details["cases"]]
    assert verdicts == ["pass"] * len(same) + ["fail"] * len(different), list(zip(same + different, verdicts))
    assert output_lines("a \t\r\n\nb\r\n\n \n") == ["a", "", "b"]
    with pytest.raises(ValueError, match="every case expects no output"):
        StdioSpec.model_validate({"cases": [{"input": "", "output": " \r\n\n"}]})
    assert StdioSpec.model_validate({"cases": [{"input": "", "output": "\xa0"}]})  # a character, not nothing


def test_math_answers(sandbox_pool):
    half = {"kind": "math", "spec": {"answer": "\\frac{1}{2}"}}
    items = [
        (half, "So the probability is $\\boxed{0.5}$.", None),
        (half, "The answer is \\boxed{\\frac{1}{3}}", None),
        (half, "I do not know.", None),
        ({"kind": "math", "spec": {"answer": 42}}, "final: 42", None),
        (half, "<think>it is $\\boxed{0.5}$</think>I do not know.", None),  # the reasoning is not the answer
        (half, "<think>so it is $\\boxed{0.5}$ or", None),  # cut off while reasoning: no answer
    ]
    right, wrong, none, number, hidden, cut = verify_many(items, sandbox=sandbox_pool)
    assert (right.verdict, right.score, right.details["gold"]) == ("pass", 1.0, ["1/2"])
    assert wrong.verdict == "fail" and wrong.details["reason"] == "answer differs from the reference"
    assert none.verdict == "fail" and none.details["reason"] == "no answer found in the completion"
    assert number.verdict == "pass"
    assert [hidden.verdict, cut.verdict] == ["fail", "fail"] and hidden.details["extracted"] == []


TOOL_SPEC = {
    "answer": "1,250",
    "answer_match": "number",
    "state": [
        {"server": "bank", "tool": "get_balance", "arguments": {"account": "A"}, "expected": "750", "match": "number"},
        {"server": "bank", "tool": "get_log", "arguments": {}, "expected": r"transfer\s+500", "match": "regex"},
    ],
}


def test_tool_outcome_scores_what_was_achieved_not_which_tools_were_called():
    verifier = {"kind": "tool_outcome", "spec": json.dumps(TOOL_SPEC)}
    good = verify(verifier, "Done: the total is 1250.00 dollars.", {"end_state": ["balance: 750", "transfer  500 ok"]})
    assert (good.verdict, good.score) == ("pass", 1.0)
    calls_everything = "I called get_balance, get_log and transfer on every account. The total is 1000."
    busy = verify(verifier, calls_everything, {"end_state": ["balance: 1000", "nothing"]})
    assert busy.verdict == "fail" and busy.score == 0.0
    partial = verify(verifier, "total 1250", {"end_state": ["750", "nothing"]})
    assert partial.score == pytest.approx(2 / 3) and "state[1]" in partial.details["reason"]
    missing = verify(verifier, "total 1250", {})
    assert missing.score == pytest.approx(1 / 3) and "no end_state" in missing.details["reason"]


def test_tool_outcome_match_modes():
    def check(answer, match, completion):
        spec = {"answer": answer, "answer_match": match}
        return verify({"kind": "tool_outcome", "spec": spec}, completion).verdict

    assert check("Paris", "exact", "  Paris ") == "pass"
    assert check("Paris", "exact", "Paris, London or Rome") == "fail"
    assert check("paris", "contains", "It is PARIS, London or Rome.") == "pass"  # what contains means; never a default
    assert check("paris", "contains", "Paris?\nAnswer: London") == "fail"  # only the answer line counts
    assert check("3.5", "number", "It is 3.50 units.") == "pass"
    assert check("3.5", "number", "It is 35 units.") == "fail"
    assert check(r"\d{3}-\d{4}", "regex", "call 555-1234") == "pass"
    assert check("Paris", "contains", "<think>Paris?</think>I could not find it.") == "fail"
    assert check("(", "regex", "x") == "fail"
    for vacuous, match in [(" ", "contains"), (".*", "regex"), ("\\d*", "regex")]:  # any answer would pass
        assert check(vacuous, match, "I did nothing.") == "error"
    probe = {"server": "kv", "tool": "get", "expected": "", "match": "contains"}
    assert verify({"kind": "tool_outcome", "spec": {"state": [probe]}}, "x", {"end_state": ["?"]}).verdict == "error"
    assert verify({"kind": "tool_outcome", "spec": {}}, "x").verdict == "error"


def test_custom_verifier_loads_from_a_dotted_path():
    spec = {"path": "tests.verify.custom_checks:keyword_share", "keywords": ["alpha", "beta", "gamma", "delta"]}
    r = verify({"kind": "custom", "spec": spec}, "alpha and beta")
    assert (r.score, r.verdict) == (0.5, "fail")
    r = verify({"kind": "custom", "spec": {**spec, "pass_threshold": 0.5}}, "alpha and beta")
    assert (r.score, r.verdict) == (0.5, "pass")
    assert verify({"kind": "custom", "spec": {"path": "tests.verify.custom_checks:is_shouting"}}, "YES").score == 1.0
    full = verify({"kind": "custom", "spec": {"path": "tests.verify.custom_checks.full_result"}}, "x", {"tag": 7})
    assert (full.score, full.verdict, full.details) == (0.5, "fail", {"seen": 7})
    broken = verify({"kind": "custom", "spec": {"path": "tests.verify.custom_checks:broken"}}, "x")
    assert broken.verdict == "error" and "this verifier is broken" in broken.details["reason"]
    bad = verify({"kind": "custom", "spec": {"path": "tests.verify.custom_checks:out_of_range"}}, "x")
    assert bad.verdict == "error" and "7.0" in bad.details["reason"]


def test_a_custom_verifier_that_does_not_import_is_the_users_error():
    absent = {"kind": "custom", "spec": {"path": "tests.verify.custom_checks:nope"}}
    with pytest.raises(UserError, match="cannot import custom verifier 'tests.verify.custom_checks:nope'"):
        verify(absent, "x")
    with pytest.raises(UserError, match="custom_checks:nope"):
        verify_many([(absent, "x", None)])
    fine = {"kind": "custom", "spec": json.dumps({"path": "tests.verify.custom_checks:is_shouting"})}
    check_custom_verifiers([fine, None, {"kind": "math", "spec": "{}"}, {"kind": "custom", "spec": "not json"}])
    with pytest.raises(UserError, match="custom_checks:nope"):
        check_custom_verifiers([fine, absent, absent])
    with pytest.raises(UserError, match="'tests.verify.custom_checks:VALUE' is not callable"):
        check_custom_verifiers([{"kind": "custom", "spec": {"path": "tests.verify.custom_checks:VALUE"}}])


def test_judge_needs_a_caller_supplied_judge():
    verifier = {"kind": "judge", "spec": {"rubric": "Is it polite?"}}
    assert "context['judge']" in verify(verifier, "hi").details["reason"]
    seen = {}

    def judge(completion, spec, context):
        seen.update(spec=spec, context=context)
        return 0.8

    r = verify(verifier, "hello, please", {"judge": judge, "question": "q"})
    assert (r.score, r.verdict) == (0.8, "pass")
    assert seen == {"spec": {"rubric": "Is it polite?", "pass_threshold": 0.5}, "context": {"question": "q"}}
    unparsed = verify(verifier, "hi", {"judge": lambda c, s, x: (None, "I refuse to grade")})
    assert unparsed.verdict == "error" and unparsed.details["judge_raw"] == "I refuse to grade"
    low = verify(verifier, "go away", {"judge": lambda c, s, x: (0.1, "Rude. Score: 1/10")})
    assert (low.verdict, low.details["judge_raw"]) == ("fail", "Rude. Score: 1/10")


@pytest.mark.parametrize(
    "verifier, reason",
    [
        ({"kind": "nope", "spec": "{}"}, "unknown verifier kind 'nope'"),
        ({"kind": "unit_tests", "spec": "{not json"}, "not valid JSON"),
        ({"kind": "unit_tests", "spec": "{}"}, "test: Field required"),
        ({"kind": "stdio", "spec": {"cases": []}}, "cases"),
        ({"kind": "math", "spec": "[1]"}, "must be a JSON object"),
        ({"kind": "none", "spec": None}, "has no verifier"),
        ({}, "unknown verifier kind None"),
        ("unit_tests", "a verifier is a mapping"),
    ],
)
def test_bad_verifiers_are_error_verdicts(verifier, reason):
    r = verify(verifier, "x")
    assert r.verdict == "error" and r.score == 0.0 and reason in r.details["reason"]


def test_verify_many_keeps_input_order_and_mixes_kinds(sandbox_pool):
    items = []
    for i in range(6):
        items.append((unit({"test": f"assert f() == {i}"}), f"def f():\n    return {i if i % 2 else -1}", None))
        items.append(({"kind": "tool_outcome", "spec": {"answer": str(i)}}, f"it is {i}", None))
    results = verify_many(items, sandbox=sandbox_pool)
    assert [r.verdict for r in results[0::2]] == ["fail", "pass"] * 3
    assert all(r.verdict == "pass" for r in results[1::2])
    assert all(isinstance(r, Result) and r.verdict in VERDICTS for r in results)
    json.dumps([r.details for r in results])


def test_result_validates_its_fields():
    with pytest.raises(ValueError):
        Result(1.5, "pass")
    with pytest.raises(ValueError):
        Result(1.0, "ok")
