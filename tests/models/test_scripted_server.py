"""The scripted OpenAI-compatible server: real HTTP, n choices, usage, faults, concurrency."""

from __future__ import annotations

import asyncio
import json
import threading

import httpx

from trajkit.models.scripted_server import Fault, ScriptedServer, count_tokens, faults_at_rate


def test_chat_completions_with_n_choices_usage_and_models():
    seen = []

    def script(messages, tools, body):
        seen.append((messages, tools, body["temperature"]))
        return {"content": f"answer {len(seen)}", "tool_calls": [{"name": "add", "arguments": {"a": 1}}]}

    with ScriptedServer(script, model="m1") as server:
        body = {"model": "m1", "messages": [{"role": "user", "content": "two words"}], "n": 2, "temperature": 0.5}
        response = httpx.post(f"{server.base_url}/chat/completions", json=body)
        models = httpx.get(f"{server.base_url}/models").json()
    data = response.json()
    assert response.status_code == 200
    assert [c["message"]["content"] for c in data["choices"]] == ["answer 1", "answer 2"]
    call = data["choices"][0]["message"]["tool_calls"][0]
    assert call == {"id": "call_0_0_0", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}
    assert data["choices"][0]["finish_reason"] == "tool_calls"
    assert data["usage"]["prompt_tokens"] == count_tokens('"two words"') == 4
    assert data["usage"]["completion_tokens"] == 2 * (2 + count_tokens(json.dumps([call])))
    assert seen[0] == ([{"role": "user", "content": "two words"}], None, 0.5)
    assert models["data"][0]["id"] == "m1"
    assert server.chat_requests == [body]


def test_max_tokens_truncates_with_finish_reason_length():
    with ScriptedServer(lambda m, t, b: "one two three four five") as server:
        body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
        choice = httpx.post(f"{server.base_url}/chat/completions", json=body).json()["choices"][0]
    assert choice["message"]["content"] == "one two" and choice["finish_reason"] == "length"


def test_faults_by_index_and_a_failing_script():
    faults = {0: Fault.error(503), 1: Fault.rate_limited(2.5)}

    def script(messages, tools, body):
        raise ValueError("boom")

    with ScriptedServer(script, faults=faults) as server:
        url, body = f"{server.base_url}/chat/completions", {"messages": []}
        first, second, third = (httpx.post(url, json=body) for _ in range(3))
    assert first.status_code == 503
    assert second.status_code == 429 and second.headers["retry-after"] == "2.5"
    assert third.status_code == 500 and "ValueError: boom" in third.json()["error"]["message"]


def test_faults_at_a_seeded_rate():
    pick = faults_at_rate(Fault.error(500), 0.3, seed=7)
    hits = [i for i in range(1000) if pick(i) is not None]
    assert 200 < len(hits) < 400
    assert hits == [i for i in range(1000) if faults_at_rate(Fault.error(500), 0.3, seed=7)(i) is not None]


def test_requests_are_served_concurrently():
    release = threading.Event()

    def script(messages, tools, body):
        release.wait(5)
        return "ok"

    async def main():
        async with ScriptedServer(script) as server, httpx.AsyncClient(timeout=10) as client:
            url = f"{server.base_url}/chat/completions"
            tasks = [asyncio.create_task(client.post(url, json={"messages": []})) for _ in range(4)]
            for _ in range(1000):  # all four are held by the script at once, or this test fails
                if server.max_in_flight == 4:
                    break
                await asyncio.sleep(0.01)
            release.set()
            return [r.status_code for r in await asyncio.gather(*tasks)], server.max_in_flight

    codes, peak = asyncio.run(main())
    assert codes == [200] * 4 and peak == 4
