"""Token-in/token-out: one trajectory's token sequence, loss mask and logprobs across turns.

Each turn's prompt is the model's chat template re-rendering the whole
conversation so far; each completion is what the model sampled. ``TokenTrace``
stitches them together: the part of a prompt beyond the trace is prompt or
tool output (mask 0), the sampled tokens are the model's (mask 1, with their
logprobs; ``logprobs`` is aligned with ``token_ids``, 0.0 where the mask is 0).
A backend turn without the logprobs of its sampled tokens makes the whole
trace's logprobs unknown: ``stored_logprobs()`` is then None, never a made-up
value. SFT trains on exactly these tokens.

A template that re-renders earlier turns differently from how they were
sampled (Qwen3's template drops the reasoning of earlier turns; a re-encoded
text can split into other tokens than the sampled ones) breaks the prefix
property. The trace records the first such mismatch and keeps going.
``compare_with_template`` reports where a trace and the chat template that
training will use (TRL's prefix-preserving training template for Qwen3)
disagree; the SFT stage trains on the trace only where they agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trajkit.models.base import Completion, Message, ToolSchema
from trajkit.models.chat import to_template


def first_difference(a: list[int], b: list[int]) -> int:
    """The first index where two sequences differ (the shorter length if one is a prefix of the other)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


@dataclass
class TokenTrace:
    """Builds one trajectory's token sequence from its turns' completions."""

    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    mismatch: str | None = None  # the first place a new prompt did not extend the trace
    mismatches: int = 0
    turns: int = 0
    turns_without_logprobs: int = 0  # sampled turns whose backend gave no (or too few) logprobs

    def add(self, completion: Completion) -> None:
        """Append a turn: the new part of its prompt (mask 0), then its sampled tokens (mask 1)."""
        self.turns += 1
        prompt, sampled = completion.prompt_token_ids, completion.token_ids
        if prompt is None or sampled is None:
            self._note(f"turn {self.turns}: the backend returned no token ids")
            return
        prompt = list(prompt)
        n = len(self.token_ids)
        if prompt[:n] == self.token_ids:
            new = prompt[n:]
        else:
            at = first_difference(prompt, self.token_ids)
            self._note(
                f"turn {self.turns}: the prompt re-renders the trace differently from token {at} of {n} "
                f"(trace {self.token_ids[at : at + 8]}, prompt {prompt[at : at + 8]})"
            )
            new = self._resync(prompt, at)
        self._extend(new, 0, None)
        sampled = list(sampled)
        if completion.logprobs is None or len(completion.logprobs) != len(sampled):
            self.turns_without_logprobs += 1
        self._extend(sampled, 1, completion.logprobs)

    def stored_logprobs(self) -> list[float] | None:
        """The ``logprobs`` column: aligned with ``token_ids``, or None when a sampled turn had none."""
        return None if self.turns_without_logprobs else list(self.logprobs)

    def _resync(self, prompt: list[int], at: int) -> list[int]:
        """After a mismatch, the prompt's new part: what follows the re-rendered last sampled token."""
        last = self.token_ids[-1] if self.token_ids else None
        if last is not None and last in prompt[at:]:
            return prompt[prompt.index(last, at) + 1 :]
        return prompt[len(self.token_ids) :]

    def _extend(self, ids: list[int], mask: int, logprobs: list[float] | None) -> None:
        self.token_ids.extend(ids)
        self.loss_mask.extend([mask] * len(ids))
        if mask and logprobs is not None and len(logprobs) == len(ids):
            self.logprobs.extend(float(x) for x in logprobs)
        else:  # a prompt position, or a turn without logprobs (then stored_logprobs() is None)
            self.logprobs.extend([0.0] * len(ids))

    def _note(self, message: str) -> None:
        self.mismatches += 1
        if self.mismatch is None:
            self.mismatch = message


@dataclass(frozen=True)
class TemplateDiff:
    """Where stored tokens and a template rendering of the same conversation part ways."""

    index: int
    stored_len: int
    rendered_len: int
    stored_text: str  # a decoded window from the difference on
    rendered_text: str
    trailing_only: bool = False  # the trace is the rendering but for trailing whitespace (a final newline)

    def __str__(self) -> str:
        return (
            f"differ at token {self.index} (stored {self.stored_len} tokens, rendered {self.rendered_len}): "
            f"stored {self.stored_text!r} vs rendered {self.rendered_text!r}"
        )


def training_chat_template(tokenizer: Any) -> str:
    """The chat template TRL trains with for this tokenizer (its training patch, or the tokenizer's own)."""
    from trl.chat_template_utils import get_training_chat_template

    try:
        patched = get_training_chat_template(tokenizer)
    except ValueError:  # a template TRL cannot patch: it trains on the tokenizer's own
        patched = None
    return patched or tokenizer.chat_template


def compare_with_template(
    token_ids: list[int],
    messages: list[Message],
    tokenizer: Any,
    tools: list[ToolSchema] | None = None,
    chat_template: str | None = None,
    window: int = 12,
) -> TemplateDiff | None:
    """Compare a trace with ``chat_template`` (default: the tokenizer's) rendering ``messages``; None if equal."""
    text = tokenizer.apply_chat_template(
        to_template(messages), tools=tools or None, chat_template=chat_template, tokenize=False
    )
    rendered = tokenizer.encode(text, add_special_tokens=False)
    if rendered == list(token_ids):
        return None
    at = first_difference(list(token_ids), rendered)
    return TemplateDiff(
        index=at,
        stored_len=len(token_ids),
        rendered_len=len(rendered),
        stored_text=tokenizer.decode(list(token_ids)[at : at + window]),
        rendered_text=tokenizer.decode(rendered[at : at + window]),
        trailing_only=at == len(token_ids) and not tokenizer.decode(rendered[at:]).strip(),
    )


def trace_matches(diff: TemplateDiff | None) -> bool:
    """Whether ``compare_with_template`` found the trace to be what training renders (a final newline aside)."""
    return diff is None or diff.trailing_only
