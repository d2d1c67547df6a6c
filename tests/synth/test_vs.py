"""The verbalized-sampling parser reads what models write and never raises; the VS prompts say what the paper says."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from trajkit.synth import vs

questions = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=40).filter(
    lambda s: s.strip() and "<" not in s and ">" not in s
)
probabilities = st.floats(min_value=0.0, max_value=1.0, allow_nan=False).map(lambda p: round(p, 4))
candidate_lists = st.lists(st.tuples(questions, probabilities), min_size=1, max_size=6)


def _render_json(items: list[tuple[str, float]], fence: bool, trailing: bool, percent: bool) -> str:
    parts = []
    for q, p in items:
        prob = f'"{round(p * 100, 2)}%"' if percent else json.dumps(p)
        parts.append(
            f'{{"question": {json.dumps(q)}, "target_tools": ["add"], "probability": {prob}{"," if trailing else ""}}}'
        )
    text = '{"responses": [' + ", ".join(parts) + ("," if trailing else "") + "]}"
    return f"Here you go:\n```json\n{text}\n```\nHope this helps." if fence else text


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300))
def test_never_raises_on_arbitrary_text(text):
    parsed = vs.parse_candidates(text)
    assert isinstance(parsed.candidates, list)
    assert parsed.candidates or parsed.reason


@settings(max_examples=60, deadline=None)
@given(candidate_lists, st.booleans(), st.booleans(), st.booleans())
def test_json_round_trip_through_fences_trailing_commas_and_percents(items, fence, trailing, percent):
    parsed = vs.parse_candidates(_render_json(items, fence, trailing, percent))
    assert parsed.reason is None
    assert [c["question"] for c in parsed.candidates] == [q for q, _ in items]
    for c, (_, p) in zip(parsed.candidates, items):
        assert c["target_tools"] == ["add"]
        assert abs(c["probability"] - p) < 1e-3


@settings(max_examples=50, deadline=None)
@given(candidate_lists)
def test_tagged_round_trip(items):
    text = "".join(
        f"<response><question>{q}</question><target_tools>add, multiply</target_tools>"
        f"<probability>{p}</probability></response>\n"
        for q, p in items
    )
    parsed = vs.parse_candidates(text)
    assert [c["question"] for c in parsed.candidates] == [q.strip() for q, _ in items]
    assert [c["probability"] for c in parsed.candidates] == [p for _, p in items]


@settings(max_examples=50, deadline=None)
@given(candidate_lists, st.integers(min_value=1, max_value=200))
def test_truncated_output_never_raises_and_keeps_whole_candidates(items, cut):
    text = _render_json(items, fence=True, trailing=False, percent=False)
    parsed = vs.parse_candidates(text[: max(1, len(text) - cut)])
    assert all(isinstance(c, dict) and "probability" in c for c in parsed.candidates)
    assert parsed.candidates or parsed.reason


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=60, deadline=None)
@given(json_values)
def test_valid_json_is_read_as_is(value):
    text = json.dumps(value, ensure_ascii=False)
    assert vs._drop_trailing_commas(text) == text
    assert vs._repair(text + " and some words after it") == value


def test_reasoning_before_the_list_is_skipped():
    text = (
        "<think>the user wants {variety}</think>Some thoughts with {braces} first.\n"
        '{"responses": [{"question": "q1", "probability": 0.05}, {"question": "q2", "probability": "7%"}]}'
    )
    parsed = vs.parse_candidates(text)
    assert [(c["question"], c["probability"]) for c in parsed.candidates] == [("q1", 0.05), ("q2", 0.07)]


def test_tags_holding_json_text_and_tool_lists():
    text = (
        '<response><text>{"question": "What is 2 plus 3?", "answer": 5}</text><probability>12%</probability></response>'
        "<response><question>Store it</question><target_tools><tool>set</tool><tool>get</tool></target_tools>"
        "<probability>0.3</probability></response>"
    )
    a, b = vs.parse_candidates(text).candidates
    assert a == {"question": "What is 2 plus 3?", "answer": 5, "probability": 0.12}
    assert b["target_tools"] == ["set", "get"] and b["probability"] == 0.3


def test_unreadable_outputs_give_reasons():
    assert vs.parse_candidates(None).reason == "empty output"
    assert vs.parse_candidates("   ").reason == "empty output"
    assert vs.parse_candidates("<think>only thinking</think>").reason == "only reasoning, no answer"
    assert vs.parse_candidates("no structure at all").reason == "no JSON object or <response> tags"
    assert vs.parse_candidates("[1, 2, 3]").reason == "JSON without candidates"


def test_probabilities():
    assert vs.parse_probability(0.25) == 0.25
    assert vs.parse_probability("0.25") == 0.25
    assert vs.parse_probability("25%") == 0.25
    assert vs.parse_probability(25) == 0.25  # a percent without its sign
    assert vs.parse_probability("p ~ 0.05") == 0.05
    for bad in (-0.1, 250, "high", None, True, float("nan")):
        assert vs.parse_probability(bad) is None


def test_vs_prompts_follow_the_paper():
    standard = vs.format_instructions("vs_standard", 5, None)
    assert "Generate 5 different tasks" in standard and '"probability"' in standard
    assert "sample at random from the full distribution" in standard
    tail = vs.format_instructions("vs_standard", 5, 0.1)
    assert "tails of the distribution" in tail and "less than 0.1" in tail
    assert "<reasoning>" in vs.format_instructions("vs_cot", 3, None)
    assert "probability" not in vs.format_instructions("direct", 1, None)
    assert "Generate 2 alternative tasks" in vs.continue_instructions(2, None)
