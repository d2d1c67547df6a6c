"""The openai backend over several endpoints: least outstanding requests, back-off of a failing
endpoint and its return, per-endpoint counts in the stage's usage, the list kept out of the config hash."""

from __future__ import annotations

import asyncio

from trajkit.config import config_hash
from trajkit.models import ModelSpec, make_backend
from trajkit.models.accounting import Usage
from trajkit.models.scripted_server import Fault, ScriptedServer


def _spec(servers, **kw) -> ModelSpec:
    return ModelSpec(
        model="scripted",
        backend="openai",
        base_url=[s.base_url for s in servers],
        retry_backoff_s=0.01,
        cache=False,
        **kw,
    )


def _ask(spec: ModelSpec, usage: Usage, n: int, gap_s: float = 0.0):
    async def go():
        backend = make_backend(spec, usage)
        try:
            if not gap_s:
                return await asyncio.gather(
                    *(backend.generate([{"role": "user", "content": str(i)}]) for i in range(n))
                )
            out = []
            for i in range(n):
                out.append(await backend.generate([{"role": "user", "content": str(i)}]))
                await asyncio.sleep(gap_s)
            return out
        finally:
            await backend.aclose()

    return asyncio.run(go())


def test_requests_spread_by_least_outstanding():
    with (
        ScriptedServer(lambda m, t, b: "a", delay_s=0.1) as a,
        ScriptedServer(lambda m, t, b: "b", delay_s=0.1) as b,
    ):
        usage = Usage()
        out = _ask(_spec([a, b], max_concurrency=2), usage, 12)
        assert len(a.chat_requests) == len(b.chat_requests) == 6
        assert a.max_in_flight == b.max_in_flight == 2
    assert sorted(c[0].text for c in out) == ["a"] * 6 + ["b"] * 6
    stats = usage.as_dict()["endpoints"]
    assert {k: v["requests"] for k, v in stats.items()} == {a.base_url: 6, b.base_url: 6}
    assert all(v["errors"] == 0 and v["mean_latency_s"] >= 0.1 for v in stats.values())


def test_a_failing_endpoint_is_backed_off_then_tried_again():
    async def go(spec, usage, bad):
        backend = make_backend(spec, usage)
        ask = lambda i: backend.generate([{"role": "user", "content": str(i)}])
        try:
            first = [await ask(i) for i in range(6)]
            taken_out = len(bad.chat_requests)
            await asyncio.sleep(0.6)
            return first + [await ask(6)], taken_out
        finally:
            await backend.aclose()

    with (
        ScriptedServer(lambda m, t, b: "never", faults=lambda i: Fault.error(500)) as bad,
        ScriptedServer(lambda m, t, b: "good") as good,
    ):
        usage = Usage()
        out, taken_out = asyncio.run(go(_spec([bad, good], endpoint_backoff_s=0.5), usage, bad))
        assert taken_out == 1  # out after its first error; the retry and the next requests went to the other
        assert len(bad.chat_requests) == 2  # back after the back-off period, failed again
    assert all(c[0].text == "good" and c[0].error is None for c in out)
    stats = usage.as_dict()["endpoints"]
    assert stats[bad.base_url]["errors"] == 2 and stats[good.base_url]["errors"] == 0
    assert stats[good.base_url]["requests"] == 7


def test_the_endpoint_list_is_not_in_the_config_hash():
    one = ModelSpec(model="m", backend="openai", base_url="http://127.0.0.1:1/v1")
    many = ModelSpec(model="m", backend="openai", base_url=["http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"])
    assert config_hash(one) == config_hash(many)
