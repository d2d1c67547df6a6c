"""The openai backend against real loopback servers: exact requests, tool calls, retries, limits, secrets."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from trajkit.errors import UserError
from trajkit.models import ModelSpec, SamplingParams, make_backend
from trajkit.models.ratelimit import RateLimiter
from trajkit.models.scripted_server import Fault, ScriptedServer

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
    },
}
USER = [{"role": "user", "content": "What is 1 + 2?"}]


def spec_for(server: ScriptedServer, **kw) -> ModelSpec:
    return ModelSpec(model="scripted", backend="openai", base_url=server.base_url, retry_backoff_s=0.01, **kw)


def run(coro):
    return asyncio.run(coro)


ONE = SamplingParams()


async def generate(spec, messages=USER, tools=None, params=ONE, cache_dir=None):
    backend = make_backend(spec, cache_dir=cache_dir)
    try:
        return await backend.generate(messages, tools, params)
    finally:
        await backend.aclose()


def test_sends_the_exact_request_with_auth_and_parses_the_answer(monkeypatch):
    monkeypatch.setenv("TEST_API_KEY", "sk-test-123")
    monkeypatch.setenv("TEST_ORG", "org-9")
    history = USER + [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "name": "add", "arguments": '{"a": 1, "b": 2}'}],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "add", "content": "3"},
    ]
    reply = {
        "content": "<think>\nadd them\n</think>\n\nIt is 3.",
        "logprobs": [-0.5, -0.25],
        "token_ids": [7, 8],
        "prompt_token_ids": [1, 2, 3],
    }
    with ScriptedServer(lambda m, t, b: reply) as server:
        spec = spec_for(
            server,
            api_key_env="TEST_API_KEY",
            headers_env={"OpenAI-Organization": "TEST_ORG"},
            extra_body={"return_token_ids": True},
        )
        params = SamplingParams(n=2, temperature=0.7, top_p=0.9, max_tokens=50, stop=("END",), seed=11)
        out = run(generate(spec, history, [ADD], params))
        request = server.requests[0]
    assert request["body"] == {
        "model": "scripted",
        "messages": [
            {"role": "user", "content": "What is 1 + 2?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
                ],
            },
            {"role": "tool", "content": "3", "tool_call_id": "c1", "name": "add"},
        ],
        "n": 2,
        "temperature": 0.7,
        "top_p": 0.9,
        "max_tokens": 50,
        "tools": [ADD],
        "stop": ["END"],
        "seed": 11,
        "return_token_ids": True,
    }
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer sk-test-123"
    assert request["headers"]["OpenAI-Organization"] == "org-9"
    assert len(out) == 2
    first = out[0]
    assert (first.text, first.reasoning, first.finish_reason) == ("It is 3.", "add them", "stop")
    assert (first.token_ids, first.prompt_token_ids, first.logprobs) == ([7, 8], [1, 2, 3], [-0.5, -0.25])
    assert first.completion_tokens == 2 and first.prompt_tokens > 0 and first.error is None


def test_tool_calls_from_the_response_and_from_text_blocks():
    reply = {
        "content": 'Sure. <tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 2}}\n</tool_call>',
        "tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "rm", "arguments": {}}],
    }
    with ScriptedServer(lambda m, t, b: reply) as server:
        (c,) = run(generate(spec_for(server), tools=[ADD]))
    assert [(x.id, x.arguments) for x in c.tool_calls] == [
        ("call_0_0_0", '{"a": 1, "b": 2}'),
        (c.tool_calls[1].id, '{"a": 2, "b": 2}'),
    ]
    assert [e.reason for e in c.tool_call_errors] == ["unknown tool 'rm'"]
    assert c.text == "Sure." and c.finish_reason == "tool_calls"


def test_500s_are_retried_with_backoff_until_an_answer():
    with ScriptedServer(lambda m, t, b: "fine", faults={0: Fault.error(500), 1: Fault.error(503)}) as server:
        (c,) = run(generate(spec_for(server)))
        assert len(server.chat_requests) == 3
    assert c.text == "fine" and c.error is None


def test_429_waits_for_retry_after():
    with ScriptedServer(lambda m, t, b: "fine", faults={0: Fault.rate_limited(0.6)}) as server:
        start = time.monotonic()
        (c,) = run(generate(spec_for(server)))
        waited = time.monotonic() - start
        assert len(server.chat_requests) == 2
    assert c.text == "fine" and waited >= 0.6  # backoff alone would have waited ~0.01 s


def test_a_stalled_request_times_out_and_is_retried():
    with ScriptedServer(lambda m, t, b: "fine", faults={0: Fault.stall(30)}) as server:
        (c,) = run(generate(spec_for(server, timeout_s=0.3)))
        assert len(server.chat_requests) == 2  # the stalled one was abandoned, not waited for
    assert c.text == "fine" and c.error is None


def test_gives_up_after_max_retries_with_error_completions():
    with ScriptedServer(lambda m, t, b: "never", faults=lambda i: Fault.error(502)) as server:
        out = run(generate(spec_for(server, max_retries=2), params=SamplingParams(n=2)))
        assert len(server.chat_requests) == 3
    assert [c.finish_reason for c in out] == ["error", "error"]
    assert out[0].error == "HTTP 502: injected fault 502 (gave up after 3 attempts)"


GOOD_CHOICE = {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
GARBAGE = [
    (b"<html>oops</html>", "malformed response: not JSON"),
    ([GOOD_CHOICE], "malformed response: a JSON list, not an object"),
    ({"choices": "ok"}, "malformed response: 'choices' is not a list of objects"),
    ({"choices": [1, 2]}, "malformed response: 'choices' is not a list of objects"),
    ({"choices": [{"message": "ok"}]}, "malformed response: choice 0: 'message' is not an object"),
    ({"choices": [{"message": {"content": {"text": "ok"}}}]}, "malformed response: choice 0: 'content' is not text"),
    ({"choices": [GOOD_CHOICE], "usage": [3]}, "malformed response: 'usage' is not an object"),
    (
        {"choices": [{**GOOD_CHOICE, "logprobs": {"content": [{"token": "ok", "logprob": None}]}}]},
        "malformed response: choice 0: token 0 has logprob None",
    ),
    (
        {"choices": [{**GOOD_CHOICE, "token_ids": ["a"]}]},
        "malformed response: choice 0: token_ids is not a list of integers",
    ),
    (
        {"choices": [{**GOOD_CHOICE, "index": "first"}]},
        "malformed response: invalid literal for int() with base 10: 'first'",
    ),
]


@pytest.mark.parametrize(("body", "error"), GARBAGE, ids=[e.split(": ", 1)[1][:40] for _, e in GARBAGE])
def test_a_malformed_response_is_a_failed_completion_not_a_crash(body, error):
    with ScriptedServer(lambda m, t, b: "never", faults={0: Fault.garbage(body)}) as server:
        out = run(generate(spec_for(server, max_retries=0), params=SamplingParams(n=2)))
        assert len(server.chat_requests) == 1
    assert [(c.finish_reason, c.error) for c in out] == [("error", error)] * 2


def test_lone_surrogates_in_a_response_are_replaced_before_the_cache_and_the_rows(tmp_path):
    """JSON can escape a lone surrogate; UTF-8 cannot hold one, so the call cache (and then the stage) crashed."""
    with ScriptedServer(lambda m, t, b: "x \ud800 y") as server:
        (c,) = run(generate(spec_for(server), cache_dir=tmp_path))
    assert c.error is None and c.text == "x \ufffd y"
    c.text.encode("utf-8")


def test_client_errors_are_not_retried():
    with ScriptedServer(lambda m, t, b: "x", faults={0: Fault.error(400)}) as server:
        (c,) = run(generate(spec_for(server)))
        assert len(server.chat_requests) == 1
    assert c.error == "HTTP 400: injected fault 400"


def test_connection_errors_are_retried_then_reported():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = ModelSpec(
        model="m", backend="openai", base_url=f"http://127.0.0.1:{port}/v1", max_retries=1, retry_backoff_s=0.01
    )
    (c,) = run(generate(spec))
    assert c.error == "connection error (ConnectError) (gave up after 2 attempts)"


def test_concurrency_is_bounded():
    with ScriptedServer(lambda m, t, b: "ok", delay_s=0.2) as server:
        spec = spec_for(server, max_concurrency=3)

        async def many():
            backend = make_backend(spec)
            out = await asyncio.gather(*(backend.generate([{"role": "user", "content": str(i)}]) for i in range(9)))
            await backend.aclose()
            return out

        out = run(many())
        assert server.max_in_flight == 3
    assert all(c[0].text == "ok" for c in out)


def test_requests_spread_over_small_connection_pools_all_in_flight_at_once():
    with ScriptedServer(lambda m, t, b: "ok", delay_s=0.3) as server:
        spec = spec_for(server, max_concurrency=20)

        async def many():
            backend = make_backend(spec)
            out = await asyncio.gather(*(backend.generate([{"role": "user", "content": str(i)}]) for i in range(20)))
            pools = [len(c._transport._pool.connections) for c in backend._endpoints[0].clients]
            await backend.aclose()
            return out, pools

        out, pools = run(many())
        assert server.max_in_flight == 20  # the shards together still carry max_concurrency requests at once
    assert pools == [7, 7, 6]  # 3 httpx clients of at most 8 connections: each scans a short pool per request
    assert all(c[0].text == "ok" for c in out)


def test_requests_per_minute_paces_the_calls():
    with ScriptedServer(lambda m, t, b: "ok") as server:
        spec = spec_for(server, requests_per_minute=240)  # 4 per second, a bucket of 4

        async def many():
            backend = make_backend(spec)
            start = time.monotonic()
            await asyncio.gather(*(backend.generate([{"role": "user", "content": str(i)}]) for i in range(8)))
            return time.monotonic() - start

        elapsed = run(many())
    assert elapsed >= 0.9  # 4 at once, then one every 0.25 s


def test_rate_limiter_lets_large_amounts_through_at_the_rate():
    async def main():
        limiter = RateLimiter(per_minute=1200)  # 20 per second, a bucket of 20
        start = time.monotonic()
        await limiter.acquire(30)  # larger than the bucket: passes on a full bucket, leaves a debt
        await limiter.acquire(10)  # waits for the debt and its own amount: (10 + 10) / 20 s
        return time.monotonic() - start

    assert run(main()) >= 0.95


def test_secrets_stay_out_of_errors_and_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TEST_API_KEY", "sk-very-secret")
    with ScriptedServer(lambda m, t, b: "ok", faults={1: Fault.error(401)}) as server:
        spec = spec_for(server, api_key_env="TEST_API_KEY", max_retries=0)
        ok = run(generate(spec, cache_dir=tmp_path))
        failed = run(generate(spec, [{"role": "user", "content": "other"}], cache_dir=tmp_path))
    assert ok[0].text == "ok" and failed[0].error == "HTTP 401: injected fault 401"
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert b"ok" in stored and b"sk-very-secret" not in stored
    assert "sk-very-secret" not in spec.model_dump_json()


def test_missing_configuration_is_a_user_error(monkeypatch):
    with pytest.raises(UserError, match="needs model.base_url"):
        make_backend(ModelSpec(model="m", backend="openai"))
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    with pytest.raises(UserError, match="NOT_SET_ANYWHERE"):
        make_backend(
            ModelSpec(model="m", backend="openai", base_url="http://x/v1", headers_env={"X-Key": "NOT_SET_ANYWHERE"})
        )


PNG = {"type": "image", "mime_type": "image/png", "data": "iVBORw0KGgo=", "size": 8}
WAV = {"type": "audio", "mime_type": "audio/wav", "data": "UklGRg==", "size": 4}
CUT = {"type": "image", "mime_type": "image/png", "data": None, "size": 2_000_000}  # over the cap: named only
SHOT = USER + [
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "name": "shot", "arguments": "{}"}]},
    {"role": "tool", "tool_call_id": "c1", "content": "[image image/png, 8 bytes, part 1]", "parts": [PNG, CUT]},
    {"role": "tool", "tool_call_id": "c2", "content": "[audio audio/wav, 4 bytes, part 1]", "parts": [WAV]},
]


def test_tool_media_reach_the_model_as_a_user_message_only_when_asked(tmp_path):
    """OpenAI tool messages take text only: with tool_media user_message, a tool result's images and audio
    follow the tool messages as a user message's image_url / input_audio parts, and are part of the cache
    key; by default the request and the key are what they were (the parts never sent)."""
    from trajkit.models.cache import call_key

    with ScriptedServer(lambda m, t, b: "seen") as server:
        run(generate(spec_for(server), SHOT))
        run(generate(spec_for(server, tool_media="user_message"), SHOT))
        plain, media = (r["messages"] for r in server.chat_requests)
    assert plain[-1]["role"] == "tool" and all("parts" not in m for m in plain)
    assert media[:-1] == plain and media[-1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "[media returned by tool call c1]"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            {"type": "text", "text": "[media returned by tool call c2]"},
            {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
        ],
    }
    other = [*SHOT[:2], {**SHOT[2], "parts": [{**PNG, "data": "AAAA"}]}, SHOT[3]]

    def key(messages, **kw):
        return call_key("m", messages, None, ONE, ModelSpec(model="m", backend="openai", **kw))

    assert key(SHOT) == key(other) == key([{k: v for k, v in m.items() if k != "parts"} for m in SHOT])
    assert key(SHOT, tool_media="user_message") != key(other, tool_media="user_message") != key(SHOT)
    with pytest.raises(ValueError, match="tool_media 'user_message' is for the openai backend"):
        ModelSpec(model="m", tool_media="user_message")
