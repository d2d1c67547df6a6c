"""Token-in/token-out traces, and where they differ from the chat template training will use."""

from __future__ import annotations

import asyncio

import pytest

from trajkit.models import Completion, ModelSpec, SamplingParams
from trajkit.models.chat import decode_completion, render_prompt, to_template
from trajkit.models.tokens import (
    TokenTrace,
    compare_with_template,
    first_difference,
    trace_matches,
    training_chat_template,
)
from trajkit.models.transformers_backend import TransformersBackend

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
    },
}


def sampled(tokenizer, messages, text, tools=(ADD,)) -> Completion:
    """The completion a model that writes ``text`` (canonically tokenized, then <|im_end|>) returns."""
    prompt = tokenizer.encode(render_prompt(tokenizer, messages, list(tools) or None), add_special_tokens=False)
    ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    return decode_completion(
        tokenizer, prompt, ids, [-0.5] * len(ids), "stop", list(tools) or None, ends_with_stop_token=True
    )


def test_a_tool_loop_extends_its_trace_and_matches_trls_training_template(tiny_tokenizer):
    tok = tiny_tokenizer
    messages = [{"role": "user", "content": "What is 1 + 2?"}]
    first = sampled(
        tok,
        messages,
        '<think>\nI add.\n</think>\n\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>',
    )
    assert (first.reasoning, first.finish_reason, first.tool_calls[0].name) == ("I add.", "tool_calls", "add")
    messages += [
        first.message(),
        {"role": "tool", "tool_call_id": first.tool_calls[0].id, "name": "add", "content": "3"},
    ]
    second = sampled(tok, messages, "<think>\nGot it.\n</think>\n\nThe answer is 3.")
    messages.append(second.message())

    trace = TokenTrace()
    trace.add(first)
    trace.add(second)
    assert trace.mismatch is None and trace.turns == 2
    tool_part = second.prompt_token_ids[len(first.prompt_token_ids) + len(first.token_ids) :]
    assert (
        tok.decode(tool_part)
        == "\n<|im_start|>user\n<tool_response>\n3\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    expected_mask = (
        [0] * len(first.prompt_token_ids)
        + [1] * len(first.token_ids)
        + [0] * len(tool_part)
        + [1] * len(second.token_ids)
    )
    assert trace.loss_mask == expected_mask
    assert trace.token_ids == second.prompt_token_ids + second.token_ids
    assert [lp for lp, m in zip(trace.logprobs, trace.loss_mask) if m] == [-0.5] * sum(expected_mask)

    diff = compare_with_template(trace.token_ids, messages, tok, [ADD], training_chat_template(tok))
    # the training rendering of the conversation only adds the newline after the last <|im_end|>
    assert (diff.index, diff.rendered_len, diff.rendered_text) == (len(trace.token_ids), len(trace.token_ids) + 1, "\n")
    assert diff.trailing_only and trace_matches(diff)


def test_a_follow_up_question_breaks_qwen3s_template_but_not_trls_training_template(tiny_tokenizer):
    tok = tiny_tokenizer
    messages = [{"role": "user", "content": "Hi"}]
    first = sampled(tok, messages, "<think>\nGreet back.\n</think>\n\nHello!", tools=())
    messages += [first.message(), {"role": "user", "content": "Bye"}]
    second = sampled(tok, messages, "<think>\nSay bye.\n</think>\n\nBye!", tools=())
    messages.append(second.message())

    trace = TokenTrace()
    trace.add(first)
    trace.add(second)
    # Qwen3's template drops the first turn's reasoning once a new question follows: the prompt stops extending the trace
    think_at = len(first.prompt_token_ids)
    assert trace.mismatch.startswith(f"turn 2: the prompt re-renders the trace differently from token {think_at} ")
    assert tok.decode(trace.token_ids).endswith(
        "Hello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n<think>\nSay bye.\n</think>\n\nBye!<|im_end|>"
    )
    assert sum(trace.loss_mask) == len(first.token_ids) + len(second.token_ids)

    original = compare_with_template(trace.token_ids, messages, tok)
    assert original.index == think_at and original.stored_text.startswith("<think>\nGreet back.")
    assert not trace_matches(original)
    training = compare_with_template(trace.token_ids, messages, tok, chat_template=training_chat_template(tok))
    assert training.index == len(trace.token_ids)  # only the final newline


def test_a_sampled_turn_without_logprobs_makes_the_traces_logprobs_unknown(tiny_tokenizer):
    tok = tiny_tokenizer
    messages = [{"role": "user", "content": "Hi"}]
    first = sampled(tok, messages, "Hello!", tools=())
    trace = TokenTrace()
    trace.add(first)
    assert trace.stored_logprobs() == trace.logprobs and -0.5 in trace.stored_logprobs()
    messages += [first.message(), {"role": "user", "content": "Again"}]
    second = sampled(tok, messages, "Hello again!", tools=())
    second.logprobs = None  # a server that returned token ids but no logprobs for this turn
    trace.add(second)
    assert trace.turns_without_logprobs == 1 and trace.stored_logprobs() is None
    assert len(trace.token_ids) == len(trace.loss_mask) == len(trace.logprobs)  # the tokens are still whole


def test_turns_without_token_ids_are_recorded():
    trace = TokenTrace()
    trace.add(Completion(text="from a server without token ids"))
    assert trace.token_ids == [] and trace.mismatch == "turn 1: the backend returned no token ids"


@pytest.fixture(scope="module")
def local(tiny_model_dir):
    return TransformersBackend(ModelSpec(model=str(tiny_model_dir), device="cpu"))


def test_a_trace_of_the_real_backend_keeps_every_sampled_token(local, tiny_tokenizer):
    messages = [{"role": "user", "content": "What is 1 + 2?"}]
    params = SamplingParams(max_tokens=10, seed=3)

    async def episode():
        trace = TokenTrace()
        (first,) = await local.generate(messages, [ADD], params)
        trace.add(first)
        messages.extend([first.message(), {"role": "user", "content": "Are you sure?"}])
        (second,) = await local.generate(messages, [ADD], params)
        trace.add(second)
        messages.append(second.message())
        return trace, first, second

    trace, first, second = asyncio.run(episode())
    assert trace.token_ids[: len(first.prompt_token_ids)] == first.prompt_token_ids
    assert [t for t, m in zip(trace.token_ids, trace.loss_mask) if m] == first.token_ids + second.token_ids
    assert [lp for lp, m in zip(trace.logprobs, trace.loss_mask) if m] == first.logprobs + second.logprobs
    assert trace.token_ids[-len(second.token_ids) :] == second.token_ids
    turn_one = first.prompt_token_ids + first.token_ids
    assert (trace.mismatch is None) == (second.prompt_token_ids[: len(turn_one)] == turn_one)

    template = training_chat_template(tiny_tokenizer)
    diff = compare_with_template(trace.token_ids, messages, tiny_tokenizer, [ADD], template)
    text = tiny_tokenizer.apply_chat_template(
        to_template(messages), tools=[ADD], chat_template=template, tokenize=False
    )
    rendered = tiny_tokenizer.encode(text, add_special_tokens=False)
    assert diff.index == first_difference(trace.token_ids, rendered) >= len(first.prompt_token_ids)
    assert (diff.stored_len, diff.rendered_len) == (len(trace.token_ids), len(rendered))
    assert str(diff).startswith(f"differ at token {diff.index} ")
