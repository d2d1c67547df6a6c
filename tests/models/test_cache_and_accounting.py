"""The persistent call cache and token/cost accounting, down to a stage stopped by its budget."""

from __future__ import annotations

import asyncio
import multiprocessing
import shutil
import time
from pathlib import Path

import pytest

from trajkit.config import StageConfig
from trajkit.errors import StageStopped
from trajkit.models import ModelSpec, SamplingParams, make_backend
from trajkit.models.accounting import Usage
from trajkit.models.cache import CallCache, call_key, model_identity
from trajkit.models.scripted_server import Fault, ScriptedServer, count_tokens
from trajkit.runner import StageContext, StageSpec, run_stage
from trajkit.schema import content_id
from trajkit.store import Store


def spec_for(server: ScriptedServer, **kw) -> ModelSpec:
    return ModelSpec(model="scripted", backend="openai", base_url=server.base_url, retry_backoff_s=0.01, **kw)


def ask(i: int) -> list[dict]:
    return [{"role": "user", "content": f"task {i}"}]


TWO_SEEDED = SamplingParams(n=2, seed=3)


async def calls(spec, usage, cache_dir, prompts, params=TWO_SEEDED):
    backend = make_backend(spec, usage, cache_dir)
    try:
        return await asyncio.gather(*(backend.generate(p, None, params) for p in prompts))
    finally:
        await backend.aclose()


def test_a_rerun_pays_nothing_twice(tmp_path):
    with ScriptedServer(lambda m, t, b: "one two three") as server:
        spec = spec_for(server, price_input_per_mtok=2.0, price_output_per_mtok=10.0)
        first_usage, second_usage = Usage(), Usage()
        first = asyncio.run(calls(spec, first_usage, tmp_path, [ask(i) for i in range(3)]))
        assert len(server.chat_requests) == 3
        second = asyncio.run(calls(spec, second_usage, tmp_path, [ask(i) for i in range(3)]))
        assert len(server.chat_requests) == 3  # zero backend calls on the second run
    assert [[c.text for c in r] for r in second] == [[c.text for c in r] for r in first]
    assert all(c.cached for r in second for c in r) and not any(c.cached for r in first for c in r)
    prompt = count_tokens('"task 0"')
    endpoints = first_usage.as_dict().pop("endpoints")
    assert [e["requests"] for e in endpoints.values()] == [3]  # requests per endpoint, none on the cached rerun
    assert first_usage.served == second_usage.served == {"scripted": "scripted"}  # what /v1/models reports
    assert {k: v for k, v in first_usage.as_dict().items() if k not in ("endpoints", "served")} == {
        "prompt_tokens": 3 * prompt,  # a prompt is paid once per call, whatever n
        "completion_tokens": 3 * 2 * 3,
        "calls": 3,
        "cached_calls": 0,
        "failed_calls": 0,
        "cost": round((3 * prompt * 2.0 + 18 * 10.0) / 1e6, 6),
    }
    assert second_usage.as_dict() == {
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "calls": 0,
        "cached_calls": 3,
        "failed_calls": 0,
        "cost": 0.0,
        "served": {"scripted": "scripted"},
    }
    assert [c.completion_tokens for c in first[0]] == [3, 3] and first[0][0].prompt_tokens == prompt


def test_the_key_covers_model_messages_tools_params_and_seed():
    spec = ModelSpec(model="m", backend="openai", base_url="http://a/v1")
    messages = [{"role": "assistant", "content": "", "tool_calls": [{"id": "c", "name": "f", "arguments": "{}"}]}]
    nested = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        }
    ]
    tool = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    base = call_key("m", messages, None, SamplingParams(), spec)
    variants = [
        call_key("m2", messages, None, SamplingParams(), spec),
        call_key("m", ask(0), None, SamplingParams(), spec),
        call_key("m", messages, tool, SamplingParams(), spec),
        call_key("m", messages, None, SamplingParams(n=2), spec),
        call_key("m", messages, None, SamplingParams(seed=1), spec),
        call_key("m", messages, None, SamplingParams(temperature=0.5), spec),
        call_key("m", messages, None, SamplingParams(stop=("x",)), spec),
        call_key(
            "m",
            messages,
            None,
            SamplingParams(),
            spec.model_copy(update={"chat_template_kwargs": {"enable_thinking": False}}),
        ),
    ]
    assert len({base, *variants}) == len(variants) + 1
    # the same call whatever the message shape, endpoint, backend or concurrency
    other = ModelSpec(model="m", backend="vllm", base_url="http://b/v1", max_concurrency=1, timeout_s=5)
    assert call_key("m", nested, None, SamplingParams(), other) == base


def test_identical_calls_in_flight_are_made_once(tmp_path):
    with ScriptedServer(lambda m, t, b: "slow", delay_s=0.3) as server:
        usage = Usage()
        out = asyncio.run(calls(spec_for(server), usage, tmp_path, [ask(1)] * 3))
        assert len(server.chat_requests) == 1
    assert sorted(r[0].cached for r in out) == [False, True, True]
    assert (usage.calls, usage.cached_calls) == (1, 2)


def test_failed_calls_are_not_cached(tmp_path):
    with ScriptedServer(lambda m, t, b: "ok", faults={0: Fault.error(400)}) as server:
        (failed,) = asyncio.run(calls(spec_for(server), Usage(), tmp_path, [ask(1)]))
        (retried,) = asyncio.run(calls(spec_for(server), Usage(), tmp_path, [ask(1)]))
        assert len(server.chat_requests) == 2
    assert failed[0].error and retried[0].text == "ok" and not retried[0].cached


def test_a_local_models_identity_follows_its_weights(tiny_model_dir, tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(tiny_model_dir, copy)
    before = model_identity(str(copy))
    assert before.startswith(str(copy.resolve()) + "@") and model_identity(str(copy)) == before
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # retrained weights saved to the same path
    weights.write_bytes(bytes(data))
    assert model_identity(str(copy)) != before
    assert model_identity("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"


# ---------------------------------------------------------------- a stage with a budget
class GenConfig(StageConfig):
    model: ModelSpec
    tasks: int = 6


def run_gen(ctx: StageContext, cfg: GenConfig) -> dict:
    done = ctx.done("samples")
    backend = make_backend(cfg.model, ctx.usage, ctx.store.root / "_cache")

    async def main():
        for i in range(cfg.tasks):
            sample_id = content_id("gen", i)
            if sample_id in done:
                continue
            (c,) = await backend.generate(ask(i), None, SamplingParams(seed=i))
            row = {
                "sample_id": sample_id,
                "task_id": f"t{i}",
                "sample_index": 0,
                "completion": c.text,
                "verdict": "pass",
            }
            ctx.write("samples", row)

    asyncio.run(main())
    return {}


GEN = StageSpec("test.gen", GenConfig, run_gen, outputs=("samples",))


def test_a_budget_cap_stops_a_stage_cleanly_and_the_rerun_pays_only_for_the_rest(run_dir):
    store = Store(run_dir, create=True)
    with ScriptedServer(lambda m, t, b: "one two three") as server:
        cfg = GenConfig(model=spec_for(server))
        per_call = count_tokens('"task 0"') + 3
        with pytest.raises(StageStopped, match="token budget"):
            run_stage(store, GEN, cfg, quiet=True, budget_tokens=2 * per_call + 1)
        assert store.count("samples") == 2 and store.manifest("gen", 0, 1) is None
        assert len(server.chat_requests) == 3  # the third call crossed the cap; its answer is cached
        manifest = run_stage(store, GEN, cfg, quiet=True)
        assert len(server.chat_requests) == 6
    assert store.count("samples") == 6
    assert [e["requests"] for e in manifest["usage"].pop("endpoints").values()] == [3]  # only the rerun's
    assert manifest["usage"] == {
        "prompt_tokens": 3 * count_tokens('"task 0"'),
        "completion_tokens": 9,
        "calls": 3,
        "cached_calls": 1,
        "failed_calls": 0,
        "cost": 0.0,
        "served": {"scripted": "scripted"},
    }


def _open_cache_at(path: str, start: float) -> None:
    while time.time() < start:
        pass
    CallCache(Path(path))


def test_shards_opening_a_new_cache_at_once_all_get_it(tmp_path):
    """Shards of one stage (Ray tasks, ranks) open the run's new call cache at the same moment: none fails with
    sqlite's immediate "database is locked" while another switches it to WAL."""
    context = multiprocessing.get_context("fork")
    failed = 0
    for trial in range(6):
        start = time.time() + 0.3
        procs = [context.Process(target=_open_cache_at, args=(str(tmp_path / str(trial)), start)) for _ in range(8)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        failed += sum(p.exitcode != 0 for p in procs)
    assert failed == 0


def test_every_backend_a_model_spec_can_name_is_registered():
    """``make_backend`` looks the spec's backend up in one registry, as stages are looked up."""
    import typing

    from trajkit.models import BACKENDS, backend_class
    from trajkit.models.base import Backend

    assert set(typing.get_args(ModelSpec.model_fields["backend"].annotation)) == set(BACKENDS)
    for name in BACKENDS:
        cls = backend_class(name)
        assert issubclass(cls, Backend) and cls.name == name
