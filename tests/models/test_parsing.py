"""Tool-call and reasoning parsing: malformed calls are data, rendered calls parse back to themselves."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from trajkit.models.chat import to_template
from trajkit.models.parsing import (
    parse_openai_tool_calls,
    parse_tool_calls,
    render_tool_call,
    split_reasoning,
)

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {"name": "search", "description": "Search.", "parameters": {"type": "object", "properties": {}}},
}
TOOLS = [ADD, SEARCH]


def test_several_hermes_blocks_are_parsed_in_order_and_removed_from_content():
    text = (
        "Let me compute.\n"
        '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\n'
        '<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n</tool_call>'
    )
    content, calls, errors = parse_tool_calls(text, TOOLS)
    assert content == "Let me compute."
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("add", {"a": 1, "b": 2}), ("search", {"q": "x"})]
    assert errors == []
    assert len({c.id for c in calls}) == 2 and all(c.id.startswith("call_") for c in calls)


def test_text_without_blocks_is_returned_unchanged():
    assert parse_tool_calls("  plain answer \n", TOOLS) == ("  plain answer \n", [], [])


def test_malformed_calls_become_errors_with_the_raw_text_kept():
    bad_json = "<tool_call>\n{'name': 'add'}\n</tool_call>"
    unknown = '<tool_call>\n{"name": "delete_everything", "arguments": {}}\n</tool_call>'
    violates = '<tool_call>\n{"name": "add", "arguments": {"a": "one", "b": 2}}\n</tool_call>'
    missing = '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>'
    no_args = '<tool_call>\n{"name": "add"}\n</tool_call>'
    not_object = "<tool_call>\n[1, 2]\n</tool_call>"
    cut = '<tool_call>\n{"name": "add", "argu'
    good = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
    parts = [bad_json, unknown, violates, missing, no_args, not_object, good, cut]
    text = "\n".join(parts)
    content, calls, errors = parse_tool_calls(text, TOOLS)
    assert [c.name for c in calls] == ["add"] and content == ""
    assert [e.raw for e in errors] == [bad_json, unknown, violates, missing, no_args, not_object, cut]
    reasons = [e.reason for e in errors]
    assert reasons[0].startswith("not valid JSON")
    assert reasons[1] == "unknown tool 'delete_everything'"
    assert reasons[2].startswith("add: arguments violate the tool schema: a: 'one' is not of type 'integer'")
    assert "'b' is a required property" in reasons[3]
    assert reasons[4] == "add: missing arguments"
    assert reasons[5] == "tool call is not a JSON object"
    assert reasons[6] == "unterminated <tool_call> block"


def test_without_tools_any_name_and_arguments_object_is_accepted():
    _, calls, errors = parse_tool_calls('<tool_call>{"name": "x", "arguments": "{\\"k\\": [1]}"}</tool_call>', None)
    assert errors == [] and calls[0].name == "x" and json.loads(calls[0].arguments) == {"k": [1]}


def test_argument_strings_may_contain_the_tags():
    rendered = render_tool_call("search", {"q": "</tool_call> and <tool_call>"})
    _, calls, errors = parse_tool_calls(rendered + "\n" + render_tool_call("add", {"a": 1, "b": 2}), TOOLS)
    assert errors == []
    assert [json.loads(c.arguments) for c in calls] == [{"q": "</tool_call> and <tool_call>"}, {"a": 1, "b": 2}]


def test_an_unusable_tool_schema_does_not_reject_the_call():
    broken = {"type": "function", "function": {"name": "f", "parameters": {"type": "no-such-type"}}}
    _, calls, errors = parse_tool_calls(render_tool_call("f", {"x": 1}), [broken])
    assert errors == [] and calls[0].name == "f"


def test_openai_tool_calls_are_checked_like_text_calls():
    entries = [
        {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}},
        {"id": "call_2", "type": "function", "function": {"name": "add", "arguments": "{not json"}},
        {"id": "call_3", "type": "function", "function": {"name": "nope", "arguments": "{}"}},
        {"id": "call_4", "name": "search", "arguments": {"q": "flat form"}},
        "garbage",
    ]
    calls, errors = parse_openai_tool_calls(entries, TOOLS)
    assert [(c.id, c.name) for c in calls] == [("call_1", "add"), ("call_4", "search")]
    assert [e.reason.split(":")[0] for e in errors] == [
        "arguments are not valid JSON",
        "unknown tool 'nope'",
        "tool call is not an object",
    ]
    assert json.loads(errors[0].raw)["id"] == "call_2"


def test_reasoning_is_split_from_the_answer():
    assert split_reasoning("<think>\nstep 1\n</think>\n\nanswer") == ("step 1", "answer")
    assert split_reasoning("opened in the prompt\n</think>\n\nanswer") == ("opened in the prompt", "answer")
    assert split_reasoning("<think>\ncut off by the limit") == ("cut off by the limit", "")
    assert split_reasoning("no reasoning") == (None, "no reasoning")


# ---------------------------------------------------------------- properties
names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,24}", fullmatch=True)
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4), max_leaves=8
)
arguments = st.dictionaries(st.text(), values, max_size=5)
fragments = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "{",
        "}",
        '"name"',
        '"arguments"',
        ":",
        ",",
        '"add"',
        "[",
        "]",
        "\n",
        "<think>",
        "</think>",
        '"a"',
        "1",
    ]
)


@settings(max_examples=200, deadline=None)
@given(st.text() | st.lists(fragments | st.text(max_size=5), max_size=30).map("".join))
def test_parser_never_raises(text):
    for tools in (None, TOOLS):
        content, _, errors = parse_tool_calls(text, tools)
        assert isinstance(content, str)
        for e in errors:
            assert e.raw in text
    split_reasoning(text)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(names, arguments), min_size=1, max_size=3), st.text(max_size=20).map(str.strip))
def test_rendered_calls_parse_back_to_themselves(pairs, prefix):
    text = "\n".join([prefix] + [render_tool_call(n, a) for n, a in pairs])
    content, calls, errors = parse_tool_calls(text, None)
    assert errors == []
    assert [(c.name, c.arguments) for c in calls] == [(n, json.dumps(a, ensure_ascii=False)) for n, a in pairs]
    assert content == prefix.strip() or "<tool_call>" in prefix


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(names, arguments), min_size=1, max_size=3))
def test_calls_rendered_by_qwen3s_own_template_parse_back(qwen3_tokenizer, pairs):
    message = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": f"c{i}", "name": n, "arguments": json.dumps(a)} for i, (n, a) in enumerate(pairs)],
    }
    rendered = qwen3_tokenizer.apply_chat_template(
        to_template([{"role": "user", "content": "q"}, message]), tokenize=False
    )
    assistant = rendered.split("<|im_start|>assistant\n", 1)[1].removesuffix("<|im_end|>\n")
    _, reply = split_reasoning(assistant)
    content, calls, errors = parse_tool_calls(reply, None)
    assert errors == [] and content == ""
    assert [(c.name, json.loads(c.arguments)) for c in calls] == pairs
