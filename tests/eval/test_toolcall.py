"""The BFCL-style scorer on hand-made calls: names, required and unexpected arguments, types, values, sets."""

from __future__ import annotations

import pytest

from trajkit.eval.toolcall import (
    OPTIONAL,
    Call,
    Expected,
    check_call,
    expected_from_reference,
    parse_arguments,
    score_calls,
)

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "unit": {"type": "string", "default": "celsius"},
        "threshold": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "filters": {"type": "object"},
    },
    "required": ["city"],
}
SCHEMAS = {
    "get_weather": WEATHER,
    "get_time": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]},
}


def ref(name: str, **args) -> Expected:
    return Expected(name, expected_from_reference(args, SCHEMAS[name]))


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        ({"city": "Paris", "days": 3}, None),
        ({"city": "  paris ", "days": 3}, None),  # strings: case, spaces and punctuation do not matter
        ({"city": "Paris", "days": 3, "unit": "celsius"}, None),  # an optional argument given its default
        ({"days": 3}, "missing_required"),
        ({"city": "Paris"}, "missing_param"),  # the reference passed days
        ({"city": "Paris", "days": 3, "unit": "kelvin"}, "value_error"),
        ({"city": "Paris", "days": "3"}, "type_error"),
        ({"city": "Paris", "days": 3.0}, "type_error"),  # an integer parameter takes an int, as in BFCL
        ({"city": "Paris", "days": 3, "country": "FR"}, "unexpected_param"),
        ({"city": "Lyon", "days": 3}, "value_error"),
    ],
)
def test_one_call(args, reason):
    problem = check_call(Call("get_weather", args), ref("get_weather", city="Paris", days=3), WEATHER)
    assert (problem[0] if problem else None) == reason


def test_numbers_lists_and_dicts():
    exp = ref("get_weather", city="Oslo", threshold=2.5, tags=["Rain", "wind"], filters={"min": 1})
    assert (
        check_call(
            Call(
                "get_weather",
                {"city": "Oslo", "threshold": 2.5 + 1e-12, "tags": ["rain", "Wind"], "filters": {"min": 1.0}},
            ),
            exp,
            WEATHER,
        )
        is None
    )
    assert (
        check_call(
            Call("get_weather", {"city": "Oslo", "threshold": 2.6, "tags": ["rain", "wind"], "filters": {"min": 1}}),
            exp,
            WEATHER,
        )[0]
        == "value_error"
    )
    assert (
        check_call(
            Call("get_weather", {"city": "Oslo", "threshold": 2.5, "tags": ["wind", "rain"], "filters": {"min": 1}}),
            exp,
            WEATHER,
        )[0]
        == "value_error"
    )
    assert (
        check_call(
            Call("get_weather", {"city": "Oslo", "threshold": 2.5, "tags": [1, 2], "filters": {"min": 1}}), exp, WEATHER
        )[0]
        == "type_error"
    )
    assert (
        check_call(
            Call("get_weather", {"city": "Oslo", "threshold": 2.5, "tags": ["rain", "wind"], "filters": {"max": 1}}),
            exp,
            WEATHER,
        )[0]
        == "value_error"
    )


def test_float_parameters_accept_ints_as_bfcl_does():
    schema = {"properties": {"x": {"type": "float"}}, "required": ["x"]}
    assert check_call(Call("f", {"x": 2}), Expected("f", {"x": [2.0]}), schema) is None
    assert check_call(Call("f", {"x": "2"}), Expected("f", {"x": [2.0]}), schema)[0] == "type_error"


def test_parallel_calls_match_as_a_set():
    expected = [ref("get_weather", city="Paris"), ref("get_weather", city="Rome"), ref("get_time", tz="CET")]
    calls = [
        Call("get_time", {"tz": "CET"}),
        Call("get_weather", {"city": "Rome"}),
        Call("get_weather", {"city": "Paris"}),
    ]
    assert score_calls(calls, expected, SCHEMAS).correct
    v = score_calls(calls[:2] + [Call("get_weather", {"city": "Rome"})], expected, SCHEMAS)
    assert (v.correct, v.name_correct, v.args_correct, v.reason) == (False, True, False, "value_error")
    v = score_calls(calls[:2], expected, SCHEMAS)
    assert (v.correct, v.reason) == (False, "wrong_count")
    v = score_calls([Call("get_time", {"tz": "CET"})] * 2 + calls[2:], expected, SCHEMAS)
    assert (v.correct, v.name_correct, v.args_correct, v.reason) == (False, False, None, "wrong_name")


def test_parallel_matching_finds_an_assignment_that_greedy_order_misses():
    # expected[0] accepts either city, expected[1] only Paris: greedy matching of the first
    # prediction (Paris) to expected[0] would leave Rome unmatched.
    expected = [Expected("get_weather", {"city": ["Paris", "Rome"]}), Expected("get_weather", {"city": ["Paris"]})]
    calls = [Call("get_weather", {"city": "Paris"}), Call("get_weather", {"city": "Rome"})]
    assert score_calls(calls, expected, SCHEMAS).correct


def test_abstention():
    assert score_calls([], [], SCHEMAS).correct
    v = score_calls([Call("get_time", {"tz": "UTC"})], [], SCHEMAS)
    assert (v.correct, v.reason) == (False, "should_abstain")
    v = score_calls([], [ref("get_time", tz="UTC")], SCHEMAS)
    assert (v.correct, v.reason) == (False, "no_call")


def test_expected_from_reference_marks_defaults_optional():
    accept = expected_from_reference({"city": "Paris", "unit": "celsius"}, WEATHER)
    assert accept["city"] == ["Paris"] and accept["unit"] == ["celsius", OPTIONAL]
    assert accept["days"] == [OPTIONAL] and accept["tags"] == [OPTIONAL]


def test_parse_arguments():
    assert parse_arguments('{"a": 1}') == {"a": 1}
    assert parse_arguments("") == {}
    assert parse_arguments("[1, 2]") is None and parse_arguments("{not json") is None
