"""The transformers backend on the tiny model: batching, seeds, logprobs, stops, templates."""

from __future__ import annotations

import asyncio
import math

import pytest
import torch

from trajkit.errors import UserError
from trajkit.models import ModelSpec, SamplingParams, make_backend
from trajkit.models.chat import render_prompt
from trajkit.models.transformers_backend import TransformersBackend

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
    },
}


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    b = TransformersBackend(ModelSpec(model=str(tiny_model_dir), device="cpu", max_batch_size=64))
    asyncio.run(b.generate(ask("warm up"), None, SamplingParams(max_tokens=1)))
    return b


def gather(backend, *calls):
    async def main():
        return await asyncio.gather(*(backend.generate(m, t, p) for m, t, p in calls))

    return asyncio.run(main())


def processed_logprobs(model, prompt, tokens, temperature, top_p, boundary=1e-4):
    """Reference: the logprob of each sampled token under the processed distribution, from one full forward pass,
    as a (low, high) range: a token whose cumulative mass is within ``boundary`` of ``top_p`` may fall on either
    side of the nucleus cut under a different summation order (KV-cache decode vs one forward pass)."""
    ids = torch.tensor([list(prompt) + list(tokens)])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    out = []
    for step, token in zip(logits, tokens):
        logp = torch.log_softmax(step / temperature, -1)
        if top_p >= 1:
            out.append((logp[token].item(),) * 2)
            continue
        sorted_lp, order = logp.sort(descending=True)
        probs = sorted_lp.exp()
        before = probs.cumsum(0) - probs
        assert token in order[before < top_p + boundary].tolist(), "sampled outside the nucleus"
        smallest, largest = (order[before < top_p + d] for d in (-boundary, boundary))
        out.append(tuple((logp[token] - logp[keep].logsumexp(0)).item() for keep in (largest, smallest)))
    return out


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 0.8)])
def test_samples_carry_token_ids_and_the_logprobs_of_the_processed_distribution(
    backend, tiny_tokenizer, temperature, top_p
):
    (out,) = gather(
        backend,
        (ask("What is 2 + 2?"), None, SamplingParams(n=3, temperature=temperature, top_p=top_p, max_tokens=12, seed=4)),
    )
    expected_prompt = tiny_tokenizer.encode(
        render_prompt(tiny_tokenizer, ask("What is 2 + 2?"), None), add_special_tokens=False
    )
    assert len(out) == 3 and len({tuple(c.token_ids) for c in out}) == 3  # n independent samples
    model = backend.local().model
    for c in out:
        assert c.prompt_token_ids == expected_prompt and c.prompt_tokens == len(expected_prompt)
        assert c.completion_tokens == len(c.token_ids) == len(c.logprobs) > 0
        assert c.finish_reason in ("stop", "length")
        reference = processed_logprobs(model, c.prompt_token_ids, c.token_ids, temperature, top_p)
        assert all(low - 1e-4 <= a <= high + 1e-4 for a, (low, high) in zip(c.logprobs, reference))


def test_temperature_zero_is_greedy(backend):
    (out,) = gather(backend, (ask("greedy"), None, SamplingParams(n=2, temperature=0, max_tokens=8)))
    assert out[0].token_ids == out[1].token_ids
    ids = torch.tensor([out[0].prompt_token_ids + out[0].token_ids])
    with torch.no_grad():
        logits = backend.local().model(ids).logits[0, len(out[0].prompt_token_ids) - 1 : -1]
    assert logits.argmax(-1).tolist() == out[0].token_ids


def test_concurrent_calls_are_gathered_into_batches(tiny_model_dir):
    small = TransformersBackend(ModelSpec(model=str(tiny_model_dir), device="cpu", max_batch_size=5))
    calls = [(ask(f"question {i}" * (i + 1)), None, SamplingParams(n=2, max_tokens=4, seed=i)) for i in range(6)]
    gather(small, calls[0])
    first = list(small.batcher.batches)
    out = gather(small, *calls)
    assert small.batcher.batches[len(first) :] == [5, 5, 2]
    assert [len(r) for r in out] == [2] * 6


def test_a_seeded_sample_does_not_depend_on_its_batch(backend):
    params = SamplingParams(n=2, max_tokens=16, seed=5)
    (alone,) = gather(backend, (ask("same question"), None, params))
    crowd = gather(
        backend,
        (ask("a much longer question that pads the batch " * 3), None, SamplingParams(n=3, max_tokens=20, seed=9)),
        (ask("same question"), None, params),
        (ask("short"), None, SamplingParams(n=1, max_tokens=2, temperature=0.3)),
    )
    assert backend.batcher.batches[-1] == 6
    assert [c.token_ids for c in crowd[1]] == [c.token_ids for c in alone]
    assert all(
        math.isclose(a, b, abs_tol=1e-4) for x, y in zip(crowd[1], alone) for a, b in zip(x.logprobs, y.logprobs)
    )
    (other_seed,) = gather(backend, (ask("same question"), None, SamplingParams(n=2, max_tokens=16, seed=6)))
    assert [c.token_ids for c in other_seed] != [c.token_ids for c in alone]
    unseeded = gather(backend, *[(ask("same question"), None, SamplingParams(max_tokens=16))] * 2)
    assert unseeded[0][0].token_ids != unseeded[1][0].token_ids


def test_length_limit_and_stop_strings(backend):
    (full,) = gather(backend, (ask("stop test"), None, SamplingParams(max_tokens=24, seed=3, temperature=0.8)))
    c = full[0]
    assert c.finish_reason == "length" and len(c.token_ids) == 24
    tokenizer = backend.local().tokenizer
    stop = tokenizer.decode(c.token_ids[10:12])  # text the seeded sample is known to produce
    (cut,) = gather(
        backend, (ask("stop test"), None, SamplingParams(max_tokens=24, seed=3, temperature=0.8, stop=(stop,)))
    )
    s = cut[0]
    assert s.finish_reason == "stop" and s.token_ids == c.token_ids[: len(s.token_ids)] and len(s.token_ids) <= 12
    full_text = tokenizer.decode(c.token_ids)
    assert stop not in s.text and full_text.startswith(s.text) and full_text.index(stop) == len(s.text)


def test_tools_are_rendered_with_the_models_own_template(backend, tiny_tokenizer):
    (out,) = gather(backend, (ask("add 1"), [ADD], SamplingParams(max_tokens=2, seed=1)))
    prompt = tiny_tokenizer.decode(out[0].prompt_token_ids)
    assert prompt == tiny_tokenizer.apply_chat_template(
        ask("add 1"), tools=[ADD], add_generation_prompt=True, tokenize=False
    )
    assert "# Tools" in prompt and '"name": "add"' in prompt


def test_make_backend_builds_it_and_a_missing_model_is_a_user_error(tmp_path):
    backend = make_backend(ModelSpec(model=str(tmp_path / "nope"), device="cpu"))
    assert isinstance(backend, TransformersBackend) and backend.name == "transformers"
    with pytest.raises(UserError, match="cannot load model"):
        asyncio.run(backend.generate(ask("x")))


def test_a_conversation_the_template_rejects_becomes_error_completions(tiny_model_dir):
    strict = "{% if messages[0].role != 'system' %}{{ raise_exception('a system message must come first') }}{% endif %}"
    spec = ModelSpec(model=str(tiny_model_dir), device="cpu", chat_template_kwargs={"chat_template": strict})
    (out,) = gather(TransformersBackend(spec), (ask("hi"), None, SamplingParams(n=2, max_tokens=2)))
    assert [c.finish_reason for c in out] == ["error", "error"]
    assert out[0].error.startswith("the chat template cannot render this conversation: TemplateError")
    assert "a system message must come first" in out[0].error


def test_backends_of_several_models_load_at_once(tiny_model_dir):
    """Each backend loads its model in its own thread; in a fresh process (transformers not yet imported)
    four first calls at once used to fail: lazy imports and from_pretrained's meta device are process-wide."""
    import subprocess
    import sys

    code = f"""
import asyncio
from trajkit.models import ModelSpec, SamplingParams, make_backend
async def main():
    backends = [make_backend(ModelSpec(model={str(tiny_model_dir)!r}, device="cpu", cache=False)) for _ in range(4)]
    params = SamplingParams(temperature=1.0, max_tokens=2, seed=1)
    out = await asyncio.gather(*(b.generate([{{"role": "user", "content": "hi"}}], None, params) for b in backends))
    print([c[0].error for c in out])
    for b in backends:
        await b.aclose()
asyncio.run(main())
"""
    run = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().splitlines()[-1] == "[None, None, None, None]"
