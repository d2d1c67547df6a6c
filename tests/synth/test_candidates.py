"""From a parsed candidate to a task: target tools resolved, tool names and refusals caught, verifier built."""

from __future__ import annotations

import json

from trajkit.envs.tools import tool_routes
from trajkit.synth.candidates import ToolIndex, is_refusal, named_tool, to_task


def _tool(name, read_only=True):
    annotations = json.dumps({"readOnlyHint": read_only})
    return {
        "server": "",
        "name": name,
        "description": name,
        "input_schema": '{"type": "object"}',
        "annotations": annotations,
    }


SERVERS = [
    {"server_id": "c1", "name": "calculator", "status": "ok", "tools": [_tool("add"), _tool("list_keys")]},
    {"server_id": "k1", "name": "kv", "status": "ok", "tools": [_tool("set", False), _tool("get"), _tool("list_keys")]},
]
INDEX = ToolIndex(tool_routes(SERVERS))


def test_target_tools_resolve_to_the_agents_names():
    fields, reason, _ = to_task({"question": "What is 2 plus 3?", "target_tools": "add"}, INDEX)
    assert reason is None and fields["target_tools"] == ["add"]
    # a name two servers share is rendered <server>__<tool>, and found by server.tool
    fields, reason, _ = to_task({"question": "Which keys exist?", "target_tools": ["kv.list_keys"]}, INDEX)
    assert reason is None and fields["target_tools"] == ["kv__list_keys"]
    _, reason, detail = to_task({"question": "Which keys exist?", "target_tools": ["list_keys"]}, INDEX)
    assert (reason, detail) == ("unknown_target_tool", "list_keys")  # ambiguous without its server
    _, reason, detail = to_task({"question": "Fly me home", "target_tools": ["teleport", "add"]}, INDEX)
    assert (reason, detail) == ("unknown_target_tool", "teleport")
    assert to_task({"question": "Hi", "target_tools": []}, INDEX)[1] == "no_target_tools"
    assert to_task({"target_tools": ["add"]}, INDEX)[1] == "missing_question"


def test_questions_that_name_a_tool():
    assert named_tool("Please call the add tool on 2 and 3", INDEX) == "add"
    assert named_tool("Run `add` for 2 and 3", INDEX) == "add"
    assert named_tool("Use add(2, 3)", INDEX) == "add"
    assert named_tool("Show me kv__list_keys output", INDEX) == "kv__list_keys"
    assert named_tool("Add 2 and 3, then get me a coffee and set the table", INDEX) is None
    assert named_tool("Could you list keys I stored?", INDEX) is None
    assert to_task({"question": "Use the add tool", "target_tools": ["add"]}, INDEX)[1] == "question_names_tool"


def test_refusals():
    assert is_refusal("I'm sorry, but I can't help with that.")
    assert is_refusal("  As an AI, I cannot")
    assert not is_refusal("Sorting numbers: what is 2 plus 3?")
    assert to_task({"question": "I cannot write this task.", "target_tools": ["add"]}, INDEX)[1] == "refusal"


def test_verifier_from_answer_and_state():
    fields, reason, _ = to_task({"question": "What is 2 plus 3?", "target_tools": ["add"], "answer": 5}, INDEX)
    assert reason is None
    assert fields["verifier"]["kind"] == "tool_outcome"
    assert json.loads(fields["verifier"]["spec"]) == {"answer": "5", "answer_match": "number", "state": []}
    cand = {
        "question": "Remember that the color is blue.",
        "target_tools": ["set"],
        "answer": None,
        "state": [{"tool": "get", "arguments": '{"key": "color"}', "expected": "blue"}],
    }
    fields, reason, _ = to_task(cand, INDEX)
    assert reason is None
    spec = json.loads(fields["verifier"]["spec"])
    assert spec["answer"] is None and spec["answer_match"] == "exact"
    assert spec["state"] == [
        {"server": "kv", "tool": "get", "arguments": {"key": "color"}, "expected": "blue", "match": "exact"}
    ]
    fields, reason, _ = to_task({"question": "Tell me a joke about sums", "target_tools": ["add"]}, INDEX)
    assert reason is None and fields["verifier"] == {"kind": "none", "spec": "{}"}


def test_bad_verifiers_reject_rather_than_drop_the_check():
    base = {"question": "Remember that the color is blue.", "target_tools": ["set"]}
    probe = {"tool": "set", "arguments": {"key": "c", "value": "x"}, "expected": "ok"}
    _, reason, detail = to_task({**base, "state": [probe]}, INDEX)
    assert reason == "bad_verifier" and "not read-only" in detail
    _, reason, detail = to_task({**base, "state": [{"tool": "fetch", "expected": "x"}]}, INDEX)
    assert reason == "bad_verifier" and "not a tool" in detail
    _, reason, detail = to_task({**base, "answer": "blue", "answer_match": "fuzzy"}, INDEX)
    assert reason == "bad_verifier" and "fuzzy" in detail
    for lenient in ("contains", "regex"):  # a generator may not pick a check its sprayed answers pass
        _, reason, detail = to_task({**base, "answer": "blue", "answer_match": lenient}, INDEX)
        assert reason == "bad_verifier" and f"{lenient!r} is not one of number, exact" in detail
        _, reason, detail = to_task({**base, "state": [{"tool": "get", "expected": "blue", "match": lenient}]}, INDEX)
        assert reason == "bad_verifier" and f"{lenient!r} is not one of number, exact" in detail
    fields, reason, _ = to_task({**base, "answer": "Paris"}, INDEX)  # a text answer: exact, never contains
    assert reason is None and json.loads(fields["verifier"]["spec"])["answer_match"] == "exact"
    _, reason, detail = to_task({**base, "answer": "about five", "answer_match": "number"}, INDEX)
    assert reason == "bad_verifier" and "expects one number" in detail


def test_a_task_must_fit_its_mode():
    """multi_tool tasks with one target tool and multi_server tasks on one server were kept (issue 34)."""
    one = {"question": "What is 2 plus 3?", "target_tools": ["add"]}
    assert to_task(one, INDEX, "single_tool")[1] is None
    assert to_task(one, INDEX, "multi_tool")[1:] == ("mode_mismatch", "a multi_tool task targets two tools or more")
    two = {"question": "What is 2 plus 3, and which keys exist?", "target_tools": ["add", "kv.list_keys"]}
    assert to_task(two, INDEX, "multi_tool")[1] is None and to_task(two, INDEX, "multi_server")[1] is None
    same_server = {"question": "Remember the color, then read it back.", "target_tools": ["set", "get"]}
    assert to_task(same_server, INDEX, "multi_server")[1] == "mode_mismatch"
