"""The agent loop against real MCP servers and a real OpenAI-compatible loopback model server."""

from __future__ import annotations

import asyncio
import json

import pytest

from trajkit import schema as S
from trajkit.envs.agent import AgentLimits, agent_system_prompt, load_rollout, run_episode
from trajkit.envs.discovery import discover
from trajkit.envs.env import ToolEnv
from trajkit.envs.tools import tool_schemas
from trajkit.errors import UserError
from trajkit.models.base import Backend, Completion, ModelSpec, SamplingParams, ToolCall

PARAMS = SamplingParams(temperature=0.0, max_tokens=64)


def call(name: str, **arguments) -> dict:
    return {"name": name, "arguments": arguments}


def steps(*replies):
    """A script that answers with the k-th reply at the k-th assistant turn (a callable reply sees the messages)."""

    def script(messages, tools, body):
        turn = sum(m["role"] == "assistant" for m in messages)
        reply = replies[min(turn, len(replies) - 1)]
        return reply(messages) if callable(reply) else reply

    return script


def tool_results(messages) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "tool"]


def kv_task(example_servers) -> dict:
    ids = {r["name"]: r["server_id"] for r in example_servers}
    state = [{"server": "kv", "tool": "get", "arguments": {"key": "result"}, "expected": "14", "match": "exact"}]
    return {
        "task_id": "calc-kv-1",
        "question": "Convert 7 ft to inches, then compute (3 + 4) * 2 and store it under the key 'result'.",
        "server_ids": [ids["calculator"], ids["kv"], ids["units"]],
        "verifier": {"kind": "tool_outcome", "spec": json.dumps({"answer": "14", "state": state})},
    }


async def test_episode_with_parallel_calls_state_and_end_state(
    example_servers, example_servers_config, scripted_openai
):
    script = steps(
        {
            "content": "Let me start.",
            "tool_calls": [
                call("add", a=3, b=4),
                call("list_keys"),
                call("convert", value=7, from_unit="ft", to_unit="in"),
            ],
        },
        lambda m: {"tool_calls": [call("multiply", a=int(tool_results(m)[0]), b=2)]},
        lambda m: {"tool_calls": [call("set", key="result", value=tool_results(m)[-1])]},
        "The answer is 14.",
    )
    server, backend = scripted_openai(script)
    task = kv_task(example_servers)
    async with ToolEnv(example_servers, config=example_servers_config) as env:
        assert env.stateless == {"calculator": True, "kv": False, "units": True}
        row = await run_episode(task, backend, env, PARAMS, AgentLimits(max_turns=6), system_prompt="Be exact.")
    S.to_batch("trajectories", [row])  # a complete, valid row
    assert (row["status"], row["reason"], row["final_answer"]) == ("completed", None, "The answer is 14.")
    assert row["traj_id"] == S.content_id("calc-kv-1", 0, None, "scripted", None, None)  # no parent, no stage
    roles = [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert row["roles"] == roles
    assert row["tools_called"] == ["add", "list_keys", "convert", "multiply", "set"]
    assert (row["num_turns"], row["num_tool_calls"]) == (4, 5)
    assert tool_results(row["messages"]) == ["7", "[]", "84", "14", "ok: result = 14"]
    assert row["end_state"] == ["14"]  # read from the same kv process before it was shut down
    first = row["messages"][2]
    assert [c["name"] for c in first["tool_calls"]] == ["add", "list_keys", "convert"]
    assert [m["tool_call_id"] for m in row["messages"][3:6]] == [c["id"] for c in first["tool_calls"]]
    assert row["model_s"] > 0 and row["tools_s"] > 0 and row["total_s"] >= row["model_s"] + row["tools_s"]
    assert row["prompt_tokens"] > 0 and row["completion_tokens"] > 0
    assert [t["name"] for t in row["tools"]][:2] == ["add", "subtract"] and row["tools"][0]["server"] == "calculator"
    assert row["sampling"] == {"temperature": 0.0, "top_p": 1.0, "max_tokens": 64, "seed": None}
    body = server.chat_requests[0]
    assert body["tools"] == tool_schemas(example_servers, task["server_ids"])
    assert body["messages"][:2] == [
        {"role": "system", "content": agent_system_prompt("Be exact.")},  # the stage's prompt, then the Answer line
        {"role": "user", "content": task["question"]},
    ]


@pytest.fixture
async def raw_env(raw_server):
    cfg = raw_server()
    rows = await discover({"raw": cfg})
    async with ToolEnv(rows, config={"raw": cfg}) as env:
        yield env


@pytest.fixture
async def fresh_raw_env(raw_server):
    """A raw server with a fresh process per trajectory: one trajectory's crash cannot touch another's."""
    cfg = raw_server("--no-readonly")
    rows = await discover({"raw": cfg})
    async with ToolEnv(rows, config={"raw": cfg}) as env:
        yield env


def raw_task(n: int = 0) -> dict:
    return {"task_id": f"raw-{n}", "question": "Use the tools.", "server_ids": None, "verifier": None}


@pytest.mark.parametrize(
    "tool, reason, code",
    [
        (
            "crash",
            "tool crash (raw) failed: server 'raw' exited during crash (stderr: crashing on purpose)",
            "server_crash",
        ),
        ("hang", "tool hang (raw) failed: hang timed out after 0.5s", "timeout"),
        (
            "malformed",
            "tool malformed (raw) failed: malformed malformed result from 'raw': content: Input should be a valid list",
            "server_crash",
        ),
    ],
)
async def test_server_faults_fail_the_trajectory_and_the_run_goes_on(
    fresh_raw_env, scripted_openai, tool, reason, code
):
    def script(messages, tools, body):
        if "doomed" in messages[-1]["content"] and messages[-1]["role"] == "user":
            return {"tool_calls": [call(tool)]}
        return steps({"tool_calls": [call("echo", text="hello")]}, "done")(messages, tools, body)

    _, backend = scripted_openai(script)
    limits = AgentLimits(tool_timeout_s=0.5)
    doomed = raw_task(1) | {"question": "doomed"}
    rows = await asyncio.gather(
        run_episode(doomed, backend, fresh_raw_env, PARAMS, limits),
        run_episode(raw_task(2), backend, fresh_raw_env, PARAMS, limits),
    )
    assert (rows[0]["status"], rows[0]["reason"], rows[0]["reason_code"]) == ("failed", reason, code)
    assert rows[1]["reason_code"] is None
    assert tool_results(rows[0]["messages"]) == [f"Error: tool {tool} failed: {reason.split(' failed: ', 1)[1]}"]
    assert (rows[1]["status"], rows[1]["final_answer"]) == ("completed", "done")
    S.to_batch("trajectories", rows)


@pytest.mark.parametrize(
    "reply, reason, code",
    [
        (
            {"tool_calls": [{"name": "echo", "arguments": "{not json"}]},
            "malformed tool call: arguments are not valid JSON",
            "bad_arguments",
        ),
        ({"tool_calls": [call("no_such_tool")]}, "malformed tool call: unknown tool 'no_such_tool'", "unknown_tool"),
        (
            '<tool_call>\n{"name": "echo", "arguments": {"text": 1}',
            "malformed tool call: unterminated <tool_call>",
            "malformed_call",
        ),
    ],
)
async def test_unusable_tool_calls_fail_with_the_reason(raw_env, scripted_openai, reply, reason, code):
    _, backend = scripted_openai(steps(reply))
    row = await run_episode(raw_task(), backend, raw_env, PARAMS, AgentLimits())
    assert row["status"] == "failed" and row["reason"].startswith(reason) and row["reason_code"] == code
    assert row["num_tool_calls"] == 0 and row["final_answer"] is None


async def test_turn_limit_context_limit_and_max_tokens_truncate(raw_env, scripted_openai):
    _, backend = scripted_openai(steps({"tool_calls": [call("echo", text="again")]}))
    row = await run_episode(raw_task(), backend, raw_env, PARAMS, AgentLimits(max_turns=3))
    assert (row["status"], row["reason"], row["num_turns"], row["num_tool_calls"]) == (
        "truncated",
        "turn limit (3 turns)",
        3,
        3,
    )
    assert row["reason_code"] == "turn_limit"

    _, backend = scripted_openai(steps({"tool_calls": [call("big", seconds=4000)]}))
    row = await run_episode(raw_task(), backend, raw_env, PARAMS, AgentLimits(max_turns=9, max_context_tokens=500))
    assert row["status"] == "truncated" and row["reason"].startswith("context limit (")
    assert row["reason_code"] == "context_limit"
    assert row["num_turns"] == 1 and row["roles"][-1] == "tool"

    _, backend = scripted_openai(steps("word " * 100))
    row = await run_episode(raw_task(), backend, raw_env, SamplingParams(max_tokens=5), AgentLimits())
    assert (row["status"], row["reason"], row["reason_code"]) == (
        "truncated",
        "the final answer hit max_tokens",
        "max_tokens",
    )


async def test_tool_errors_are_fed_back_and_output_is_truncated(raw_env, scripted_openai):
    _, backend = scripted_openai(steps({"tool_calls": [call("fail"), call("big", seconds=500)]}, "recovered"))
    row = await run_episode(raw_task(), backend, raw_env, PARAMS, AgentLimits(max_tool_output_chars=100))
    assert (row["status"], row["final_answer"]) == ("completed", "recovered")
    failed, big = tool_results(row["messages"])
    assert failed == "Error: it failed on purpose"
    assert big == "x" * 100 + "\n[... truncated 400 characters]"
    assert [(c["kind"], c["name"], c["status"]) for c in row["calls"][1:3]] == [
        ("tool", "fail", "error"),
        ("tool", "big", "ok"),
    ]


async def test_parallel_calls_of_one_turn_run_concurrently(fresh_raw_env, scripted_openai):
    _, backend = scripted_openai(steps({"tool_calls": [call("sleep", seconds=0.3)] * 3}, "slept"))
    row = await run_episode(raw_task(), backend, fresh_raw_env, PARAMS, AgentLimits())
    assert max(int(t) for t in tool_results(row["messages"])) == 3  # all three were in flight at once
    calls = row["calls"]  # the timeline: each call with its start, seconds, tokens, status and message
    assert [(c["kind"], c["status"], row["roles"][c["message"]]) for c in calls] == [
        ("model", "tool_calls", "assistant"),
        *[("tool", "ok", "tool")] * 3,
        ("model", "stop", "assistant"),
    ]
    tools = calls[1:4]
    assert [c["message"] for c in tools] == [3, 4, 5] and all(c["seconds"] >= 0.3 for c in tools)
    assert max(c["start_s"] for c in tools) < min(c["start_s"] + c["seconds"] for c in tools)  # they overlap
    assert calls[0]["start_s"] + calls[0]["seconds"] <= tools[0]["start_s"] <= calls[4]["start_s"]
    assert all(c["completion_tokens"] > 0 for c in (calls[0], calls[4]))
    S.to_batch("trajectories", [row])


async def test_many_trajectories_interleave_model_and_tool_calls(raw_env, scripted_openai):
    server, backend = scripted_openai(steps({"tool_calls": [call("sleep", seconds=0.05)]}, "ok"), delay_s=0.05)
    rows = await asyncio.gather(*(run_episode(raw_task(i), backend, raw_env, PARAMS, AgentLimits()) for i in range(24)))
    assert [(r["status"], r["reason"]) for r in rows] == [("completed", None)] * 24
    assert server.max_in_flight > 1  # model calls overlapped one another and the tool calls
    assert max(int(tool_results(r["messages"])[0]) for r in rows) > 1
    assert len({r["traj_id"] for r in rows}) == 24


async def test_model_errors_fail_the_trajectory(raw_env, scripted_openai):
    def broken(messages, tools, body):
        raise RuntimeError("model server fell over")

    _, backend = scripted_openai(broken, max_retries=0)
    row = await run_episode(raw_task(), backend, raw_env, PARAMS, AgentLimits())
    assert row["status"] == "failed" and row["reason"].startswith("model error: HTTP 500")
    assert row["reason_code"] == "model_error"
    assert row["roles"] == ["system", "user"]
    assert [(c["kind"], c["status"], c.get("message")) for c in row["calls"]] == [("model", "error", None)]


async def test_history_continues_a_conversation(raw_env, scripted_openai):
    server, backend = scripted_openai(steps("second answer"))
    history = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "first"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "echo", "arguments": {"text": "a"}}}],
        },
        {"role": "tool", "content": "a", "tool_call_id": "c1", "name": "echo"},
        {"role": "assistant", "content": "first answer"},
    ]
    task = raw_task() | {"question": "and now?"}
    row = await run_episode(
        task, backend, raw_env, PARAMS, AgentLimits(), system_prompt="ignored", history=history, parent_id="p1", seed=7
    )
    assert row["roles"] == ["system", "user", "assistant", "tool", "assistant", "user", "assistant"]
    assert row["messages"][2]["tool_calls"] == [{"id": "c1", "name": "echo", "arguments": '{"text": "a"}'}]
    assert (row["parent_id"], row["sampling"]["seed"], row["num_turns"]) == ("p1", 7, 1)
    assert row["traj_id"] == S.content_id("raw-0", 0, 7, "scripted", "p1", None)  # no stage: run outside one
    assert server.chat_requests[0]["seed"] == 7
    S.to_batch("trajectories", [row])


async def test_a_custom_rollout_function_replaces_the_loop(raw_env, scripted_openai):
    server, backend = scripted_openai(steps("from custom"))
    rollout = load_rollout("tests.envs.custom_rollout:rollout")
    row = await rollout(raw_task(), backend, raw_env, PARAMS, AgentLimits(), rollout_index=3)
    assert (row["reason"], row["rollout_index"], row["final_answer"]) == (
        "custom rollout (completed)",
        3,
        "from custom",
    )
    system = agent_system_prompt("You are a careful calculator.")
    assert server.chat_requests[0]["messages"][0] == {"role": "system", "content": system}
    assert load_rollout(None) is run_episode
    with pytest.raises(UserError, match="must be `async def rollout"):
        load_rollout("tests.envs.custom_rollout:not_async")
    with pytest.raises(UserError, match="has no 'missing'"):
        load_rollout("tests.envs.custom_rollout:missing")


class TokenBackend(Backend):
    """A model that returns token ids: each message renders as the code points of ``role:content|``.

    No server can make a real model call tools on cue; this stand-in gives ids with the prefix
    property, so the test checks how the loop stitches turns (not how a model tokenizes).
    """

    name = "tokens"

    def __init__(self, replies):
        super().__init__(ModelSpec(model="token-model", backend="openai", base_url="http://unused"))
        self.replies = list(replies)

    @staticmethod
    def render(m) -> list[int]:
        calls = "".join(c["name"] + c["arguments"] for c in m.get("tool_calls") or [])
        return [ord(ch) for ch in f"{m['role']}:{m.get('content') or ''}{calls}|"]

    async def _generate(self, messages, tools, params):
        calls = self.replies.pop(0)
        c = Completion(text="" if calls else "done", tool_calls=calls)
        prompt = [t for m in messages for t in self.render(m)]
        sampled = self.render(c.message())
        return [
            Completion(
                text=c.text,
                tool_calls=calls,
                prompt_token_ids=prompt,
                token_ids=sampled,
                logprobs=[-0.5] * len(sampled),
                prompt_tokens=len(prompt),
                completion_tokens=len(sampled),
            )
        ]


async def test_token_ids_loss_mask_and_logprobs_cover_the_trajectory(raw_env):
    backend = TokenBackend([[ToolCall("c1", "echo", '{"text": "hi"}')], []])
    row = await run_episode(raw_task(), backend, raw_env, PARAMS, AgentLimits(), policy_version=4)
    assert row["status"] == "completed" and row["reason"] is None
    text = "".join(chr(t) for t in row["token_ids"])
    assert (
        text
        == f'system:{agent_system_prompt()}|user:Use the tools.|assistant:echo{{"text": "hi"}}|tool:hi|assistant:done|'
    )
    sampled = "".join(chr(t) for t, m in zip(row["token_ids"], row["loss_mask"]) if m == 1)
    assert sampled == 'assistant:echo{"text": "hi"}|assistant:done|'
    assert [lp for lp, m in zip(row["logprobs"], row["loss_mask"]) if m == 1] == [-0.5] * len(sampled)
    assert {lp for lp, m in zip(row["logprobs"], row["loss_mask"]) if m == 0} == {0.0}
    assert row["policy_version"] == 4
    S.to_batch("trajectories", [row])


async def test_an_extension_continues_the_world_its_first_turn_left(
    example_servers, example_servers_config, scripted_openai
):
    """Turn 2 ran on a fresh stateful server: turn 1's writes were gone (issue 34 item 2). Turn 1's calls are
    replayed first; a replay that gives another result than the recorded one is ``state_not_reproducible``."""
    ids = {r["name"]: r["server_id"] for r in example_servers}
    task = {"task_id": "kv-1", "question": "And what is the color now?", "server_ids": [ids["kv"]], "verifier": None}

    def history(recorded: str) -> list[dict]:
        set_color = {"id": "c1", "name": "set", "arguments": json.dumps({"key": "color", "value": "blue"})}
        return [
            {"role": "user", "content": "Remember that the color is blue."},
            {"role": "assistant", "content": "", "tool_calls": [set_color]},
            {"role": "tool", "content": recorded, "tool_call_id": "c1", "name": "set"},
            {"role": "assistant", "content": "Done."},
        ]

    script = steps(*[None] * 2, {"tool_calls": [call("get", key="color")]}, lambda m: f"It is {tool_results(m)[-1]}.")
    server, backend = scripted_openai(script)
    async with ToolEnv(example_servers, config=example_servers_config) as env:
        row = await run_episode(task, backend, env, PARAMS, AgentLimits(), history=history("ok: color = blue"))
        assert (row["status"], row["final_answer"]) == ("completed", "It is blue.")
        assert tool_results(row["messages"]) == ["ok: color = blue", "blue"]  # the replay adds no message
        other = await run_episode(task, backend, env, PARAMS, AgentLimits(), history=history("ok: color = red"))
    assert (other["status"], other["reason_code"]) == ("failed", "state_not_reproducible")
    assert "'ok: color = blue', not the recorded 'ok: color = red'" in other["reason"]
    assert len(server.chat_requests) == 2  # the failed extension asked the model nothing


async def test_a_replay_ignores_the_fields_a_server_declares_volatile(scripted_openai):
    """A todo server's results carry a creation time: without ``volatile`` the replay of turn 1 never matches
    (``state_not_reproducible``); with it, turn 2 sees turn 1's todo. The declaration travels in the servers
    table, so an env built from the rows alone honours it; a field it does not name still counts."""
    import sys
    from pathlib import Path

    from trajkit.envs.config import ServerConfig

    script = Path(__file__).parent / "servers" / "stamped.py"
    plain = ServerConfig(command=sys.executable, args=["-S", str(script)])  # -S: stdlib only, fast
    declared = plain.model_copy(update={"volatile": ["$.created_at"]})
    [row] = await discover({"stamped": declared})
    assert row["volatile"] == ["$.created_at"]
    task = {"task_id": "todo-1", "question": "What is on my list?", "server_ids": [row["server_id"]], "verifier": None}

    def history(recorded: dict) -> list[dict]:
        add = {"id": "c1", "name": "add_todo", "arguments": json.dumps({"title": "milk"})}
        return [
            {"role": "user", "content": "Add milk to my todos."},
            {"role": "assistant", "content": "", "tool_calls": [add]},
            {"role": "tool", "content": json.dumps(recorded), "tool_call_id": "c1", "name": "add_todo"},
            {"role": "assistant", "content": "Added."},
        ]

    milk = {"id": 1, "title": "milk", "created_at": 1764900000000000000}
    script_ = steps(*[None] * 2, {"tool_calls": [call("list_todos")]}, lambda m: f"You have {tool_results(m)[-1]}.")
    _, backend = scripted_openai(script_)
    async with ToolEnv([row]) as env:  # the rows alone: the declaration comes from the table
        row_ok = await run_episode(task, backend, env, PARAMS, AgentLimits(), history=history(milk))
        wrong_id = await run_episode(task, backend, env, PARAMS, AgentLimits(), history=history(milk | {"id": 2}))
    async with ToolEnv([row], config={"stamped": plain}) as env:  # the config's word, without the declaration
        undeclared = await run_episode(task, backend, env, PARAMS, AgentLimits(), history=history(milk))
    assert (row_ok["status"], row_ok["final_answer"]) == ("completed", 'You have ["milk"].')
    assert (wrong_id["status"], wrong_id["reason_code"]) == ("failed", "state_not_reproducible")
    assert (undeclared["status"], undeclared["reason_code"]) == ("failed", "state_not_reproducible")


def test_volatile_fields_are_paths_or_keys():
    from trajkit.envs.config import ServerConfig
    from trajkit.envs.volatile import MASK, masked, same_result

    value = {"id": 7, "items": [{"id": 1, "at": 5}, {"id": 2, "at": 6}], "meta": {"at": 9, "n": 2}}
    assert masked(value, ["$.items[*].at"]) == {**value, "items": [{"id": 1, "at": MASK}, {"id": 2, "at": MASK}]}
    assert masked(value, ["$.items[1].id", "$.meta.*"])["items"][1] == {"id": MASK, "at": 6}
    assert masked(value, ["at"]) == masked(value, ["$.items[*].at", "$.meta.at"])  # a bare key: at any depth
    assert same_result('{"a": 1, "t": 2}', '{"t": 3, "a": 1}', ["t"]) and not same_result('{"a": 1}', '{"a": 2}', ["t"])
    assert not same_result("at 2", "at 3", ["at"])  # text that is not JSON is compared whole
    for bad in ("$", "$.a b", "a.b", "$[x]"):
        with pytest.raises(ValueError, match="volatile field"):
            ServerConfig(command="x", volatile=[bad])
