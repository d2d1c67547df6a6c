"""From recorded fixture answers to training sequences: the tokenizer, the token ids, the SFT rows.

A sequence is what the ``transformers`` backend feeds the model: the prompt
rendered by the tokenizer's chat template (``trajkit.models.chat.render_prompt``),
then the reply as the model should write it (``<tool_call>`` blocks as Qwen3
writes them) and ``<|im_end|>``; only the reply carries loss. When a request's
prompt starts with another request's prompt plus reply (the next turn of an
agent episode), the two share one sequence.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from trajkit import schema as S
from trajkit.store import Store

END = "<|im_end|>"
Example = tuple[list[dict[str, Any]], "list[dict[str, Any]] | None", Any]


def reply_text(reply: Any) -> str:
    """A fixture reply as the model writes it: a ``<think>`` block when it has reasoning, the content,
    then the tool calls, laid out as Qwen3's chat template renders an assistant turn."""
    from trajkit.models.parsing import render_tool_call

    if isinstance(reply, str):
        return reply
    content = reply.get("content") or ""
    calls = [render_tool_call(c["name"], c.get("arguments") or {}) for c in reply.get("tool_calls") or []]
    body = content + "".join(("\n" if i or content else "") + call for i, call in enumerate(calls))
    reasoning = reply.get("reasoning_content")
    return f"<think>\n{reasoning.strip()}\n</think>\n\n{body}" if reasoning else body


def build_tokenizer(examples: list[Example], out_dir: Path, vocab_size: int) -> Path:
    """A byte-level BPE trained on the rendered prompts and replies, with Qwen3's added tokens and chat template.

    Unlike ``trajkit.models.tiny.train_tokenizer`` it does not split text into
    words first: BPE merges run across spaces and punctuation (never across
    digits or line breaks), so the prompts' long, repeated boilerplate (tool
    schemas, judge rubrics) becomes a few tokens and the sequences a tiny
    model trains on get about four times shorter.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from trajkit.models.chat import render_prompt
    from trajkit.models.tiny import QWEN3_ADDED_TOKENS, qwen3_chat_template, train_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        template = AutoTokenizer.from_pretrained(train_tokenizer(tmp, vocab_size=300))
        texts = [render_prompt(template, m, t) + reply_text(r) + END for m, t, r in examples]
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\n|[0-9]"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    added = [t for t, _ in QWEN3_ADDED_TOKENS]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=added,
        min_frequency=2,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    tok.add_tokens([AddedToken(t, special=s, normalized=False) for t, s in QWEN3_ADDED_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=END,
        pad_token="<|endoftext|>",
        additional_special_tokens=[t for t, s in QWEN3_ADDED_TOKENS if s and t != "<|endoftext|>"],
        model_max_length=32768,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = qwen3_chat_template()
    fast.save_pretrained(out_dir)
    return out_dir


def sequences(tokenizer: Any, examples: list[Example]) -> list[tuple[list[int], list[int]]]:
    """(token ids, loss mask) per sequence; the turns of one conversation merged into one."""
    from trajkit.models.chat import render_prompt

    end = tokenizer.convert_tokens_to_ids(END)
    items = set()  # requests that differ only in what the template does not render (call ids) are one
    for messages, tools, reply in examples:
        prompt = tokenizer.encode(render_prompt(tokenizer, messages, tools), add_special_tokens=False)
        completion = tokenizer.encode(reply_text(reply), add_special_tokens=False) + [end]
        items.add((tuple(prompt), tuple(completion)))
    out: list[tuple[list[int], list[int]]] = []
    by_ids: dict[tuple[int, ...], int] = {}
    for prompt, completion in sorted(items, key=lambda x: (len(x[0]), x)):
        host = next(
            (
                by_ids[key]
                for n in sorted({len(ids) for ids, _ in out}, reverse=True)
                if n <= len(prompt) and (key := tuple(prompt[:n])) in by_ids
            ),
            None,
        )
        if host is None:
            ids, mask = list(prompt), [0] * len(prompt)
            out.append((ids, mask))
            host = len(out) - 1
        else:
            ids, mask = out[host]
            del by_ids[tuple(ids)]
            mask.extend([0] * (len(prompt) - len(ids)))
            ids.extend(prompt[len(ids) :])
        ids.extend(completion)
        mask.extend([1] * len(completion))
        by_ids[tuple(ids)] = host
    return out


def sft_rows(seqs: list[tuple[list[int], list[int]]]) -> list[dict[str, Any]]:
    """``trajectories`` rows carrying only the tokens: what ``train.sft`` trains on with ``source: tokens``."""
    return [
        {
            "traj_id": S.content_id("warmup", ids),
            "task_id": "warmup",
            "status": "completed",
            "token_ids": ids,
            "loss_mask": mask,
        }
        for ids, mask in seqs
    ]


def verify_rollouts(store: Store) -> dict[str, int]:
    """Verdicts of the fixture's own first-turn trajectories against their tasks' outcome checks."""
    from trajkit.verify import verify

    tasks = {t["task_id"]: t for t in store.rows("tasks", ["task_id", "verifier"])}
    counts: dict[str, int] = {}
    for row in store.rows("trajectories", ["task_id", "parent_id", "status", "final_answer", "end_state"]):
        verifier = (tasks.get(row["task_id"]) or {}).get("verifier") or {}
        if row["parent_id"] is not None or verifier.get("kind") != "tool_outcome":
            continue
        if row["status"] != "completed":
            verdict = row["status"]
        else:
            verdict = verify(verifier, row["final_answer"] or "", {"end_state": row["end_state"]}).verdict
        counts[verdict] = counts.get(verdict, 0) + 1
    return dict(sorted(counts.items()))
