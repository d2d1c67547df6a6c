"""The vllm backend against a fake ``vllm`` module at its API boundary (vLLM cannot run here)."""

from __future__ import annotations

import asyncio
import json
import sys
import types
from typing import ClassVar

import pytest

from trajkit.errors import UserError
from trajkit.models import ModelSpec, SamplingParams, make_backend
from trajkit.models.base import sample_seed
from trajkit.models.chat import render_prompt
from trajkit.models.vllm_backend import MISSING

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
    },
}


class FakeSamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


class FakeLogprob:
    def __init__(self, logprob: float):
        self.logprob = logprob


class FakeLLM:
    """Records every call; answers each prompt with the scripted token ids of its sampling params' ``n``."""

    instances: ClassVar[list[FakeLLM]] = []

    def __init__(self, **kwargs):
        from transformers import AutoTokenizer

        self.kwargs = kwargs
        self.calls: list[dict] = []
        self.tokenizer = AutoTokenizer.from_pretrained(kwargs["model"])
        FakeLLM.instances.append(self)

    def get_tokenizer(self):
        return self.tokenizer

    def generate(self, prompts, sampling_params=None, use_tqdm=True):
        self.calls.append({"prompts": prompts, "params": [p.kwargs for p in sampling_params], "use_tqdm": use_tqdm})
        eos = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        answer = '<think>\nadd it\n</think>\n\n<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>'
        results = []
        for prompt, params in zip(prompts, sampling_params):
            outputs = []
            for i in range(params.kwargs["n"]):
                if params.kwargs["stop"]:  # vLLM cut the text at the stop string and says which one
                    ids, finish, reason = self.tokenizer.encode("say hi END and more"), "stop", "END"
                else:
                    ids, finish, reason = self.tokenizer.encode(answer) + [eos], "stop", None
                logprobs = [{t: FakeLogprob(-0.01 * (k + i)), t + 1: FakeLogprob(-9.0)} for k, t in enumerate(ids)]
                outputs.append(
                    types.SimpleNamespace(
                        index=i, token_ids=ids, logprobs=logprobs, finish_reason=finish, stop_reason=reason
                    )
                )
            results.append(types.SimpleNamespace(prompt_token_ids=prompt["prompt_token_ids"], outputs=outputs[::-1]))
        return results


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM = FakeLLM
    module.SamplingParams = FakeSamplingParams
    monkeypatch.setitem(sys.modules, "vllm", module)
    FakeLLM.instances.clear()
    return module


def test_prompts_sampling_params_and_logprobs_requested_exactly(fake_vllm, tiny_model_dir, tiny_tokenizer):
    spec = ModelSpec(
        model=str(tiny_model_dir), backend="vllm", dtype="bfloat16", engine_args={"gpu_memory_utilization": 0.5}
    )
    backend = make_backend(spec)
    conversations = [[{"role": "user", "content": f"add {i}"}] for i in range(3)]

    async def main():
        calls = [
            backend.generate(c, [ADD], SamplingParams(n=2, temperature=0.6, top_p=0.95, max_tokens=64, seed=7))
            for c in conversations
        ]
        return await asyncio.gather(*calls)

    results = asyncio.run(main())
    (llm,) = FakeLLM.instances
    assert llm.kwargs == {
        "model": str(tiny_model_dir),
        "logprobs_mode": "processed_logprobs",
        "dtype": "bfloat16",
        "gpu_memory_utilization": 0.5,
    }
    assert len(llm.calls) == 1  # three concurrent calls, one engine call
    (call,) = llm.calls
    expected = [
        tiny_tokenizer.encode(render_prompt(tiny_tokenizer, c, [ADD]), add_special_tokens=False) for c in conversations
    ]
    # a seeded request for 2 samples is 2 one-sample requests, seeded as the transformers backend seeds them
    assert call["prompts"] == [{"prompt_token_ids": ids} for ids in expected for _ in range(2)]
    sample = {"n": 1, "temperature": 0.6, "top_p": 0.95, "max_tokens": 64, "stop": None, "logprobs": 0}
    assert call["params"] == [{**sample, "seed": sample_seed(7, j)} for _ in conversations for j in range(2)]
    assert sample_seed(7, 0) != sample_seed(7, 1)
    assert call["use_tqdm"] is False
    for ids, out in zip(expected, results):
        assert len(out) == 2
        for c in out:
            assert c.prompt_token_ids == ids and c.prompt_tokens == len(ids)
            assert c.reasoning == "add it" and c.text == "" and c.finish_reason == "tool_calls"
            assert [(t.name, json.loads(t.arguments)) for t in c.tool_calls] == [("add", {"a": 1})]
            assert c.token_ids[-1] == tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
            assert c.logprobs == [-0.01 * k for k in range(len(c.token_ids))]


def test_an_unseeded_request_asks_the_engine_for_n_samples_at_once(fake_vllm, tiny_model_dir):
    backend = make_backend(ModelSpec(model=str(tiny_model_dir), backend="vllm"))
    out = asyncio.run(backend.generate([{"role": "user", "content": "hi"}], None, SamplingParams(n=3)))
    (call,) = FakeLLM.instances[0].calls
    assert [(p["n"], p["seed"]) for p in call["params"]] == [(3, None)] and len(out) == 3
    assert [c.logprobs[0] for c in out] == [0.0, -0.01, -0.02]  # in the engine's sample order


def test_a_stop_string_cuts_the_text(fake_vllm, tiny_model_dir):
    backend = make_backend(ModelSpec(model=str(tiny_model_dir), backend="vllm"))
    (c,) = asyncio.run(backend.generate([{"role": "user", "content": "hi"}], None, SamplingParams(stop=("END",))))
    assert FakeLLM.instances[0].calls[0]["params"][0]["stop"] == ["END"]
    assert c.text == "say hi " and c.finish_reason == "stop" and len(c.token_ids) == c.completion_tokens


def test_without_vllm_installed_the_error_is_one_clear_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(UserError) as e:
        make_backend(ModelSpec(model="m", backend="vllm"))
    assert str(e.value) == MISSING == "the vllm backend needs the vllm extra: pip install 'trajkit[vllm]'"
