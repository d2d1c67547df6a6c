"""A real harness no one here wrote (the OpenAI Agents SDK, pinned in the dev extra) runs unchanged through the
recording proxy in front of a stand-in model: its trajectories land whole, and rerun against `--replay` of the
recording it gets the same answers without the upstream."""

from __future__ import annotations

import asyncio
import re

import agents  # the OpenAI Agents SDK, pinned in the dev extra

from tests.curate.helpers import run
from trajkit.models.record import RecordingProxy
from trajkit.models.replay import ReplayServer, open_cache
from trajkit.models.scripted_server import ScriptedServer
from trajkit.store import Store

QUESTIONS = ("What is 2 plus 3?", "What is 10 plus 32?")


def adder(messages, tools, body):
    """The stand-in model: call the add tool with the question's numbers, then answer with its result."""
    if messages[-1]["role"] == "tool":
        return f"The sum is {messages[-1]['content']}."
    a, b = map(int, re.findall(r"\d+", messages[-1]["content"]))
    return {"content": None, "tool_calls": [{"name": "add", "arguments": {"a": a, "b": b}}]}


async def harness(base_url: str) -> list[str]:
    """The Agents SDK as its users write it: an agent with a function tool; one run plain, one streamed."""
    from openai import AsyncOpenAI

    @agents.function_tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    client = AsyncOpenAI(base_url=base_url, api_key="not-a-key")
    model = agents.OpenAIChatCompletionsModel(model="stand-in", openai_client=client)
    agent = agents.Agent(name="adder", instructions="Add with the tool.", tools=[add], model=model)
    plain = await agents.Runner.run(agent, QUESTIONS[0])
    streamed = agents.Runner.run_streamed(agent, QUESTIONS[1])
    async for _ in streamed.stream_events():
        pass
    return [plain.final_output, streamed.final_output]


def test_the_agents_sdk_is_recorded_whole_and_replays_the_same(run_dir):
    agents.set_tracing_disabled(True)  # its traces would go to OpenAI's servers
    with ScriptedServer(adder, model="stand-in") as up:
        with RecordingProxy(up.base_url, run_dir) as proxy:
            answers = asyncio.run(harness(proxy.base_url))
        upstream_calls = len(up.chat_requests)
    assert answers == ["The sum is 5.", "The sum is 42."] and upstream_calls == 4

    store = Store(run_dir)
    run(store, "curate.traces")
    rows = {r["final_answer"]: r for r in store.rows("trajectories")}
    assert set(rows) == set(answers)
    for answer, question, result in zip(answers, QUESTIONS, ("5", "42")):
        row = rows[answer]
        assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
        assert row["messages"][1]["content"] == question and row["messages"][3]["content"] == result
        assert row["messages"][3]["tool_call_id"] == row["messages"][2]["tool_calls"][0]["id"]
        assert (row["status"], row["num_turns"], row["tools_called"], row["source"]) == (
            "completed",
            2,
            ["add"],
            "recorded",
        )

    with ReplayServer(open_cache(run_dir)) as replay:  # what `trajkit model serve --replay RUN` serves
        assert asyncio.run(harness(replay.base_url)) == answers
        assert len(replay.chat_requests) == 4
