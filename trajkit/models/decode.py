"""A batched sampling loop over a Hugging Face causal LM: prefill once, then KV-cache decode steps.

Why not ``model.generate``: rows in one batch need their own temperature,
top-p, length limit, stop strings and seed; a row's sample must not depend on
which other rows share its batch; the logprob of every sampled token is
needed; and a request for ``n`` samples should prefill its prompt once.

* Prompts are left-padded, with an attention mask and position ids that skip
  the padding. Identical prompts (the ``n`` samples of a request) are
  prefilled once and their KV cache rows repeated.
* Randomness is counter-based: the uniform number that picks row r's token at
  step t is a hash of (row seed, t), computed on the device for all rows at
  once. A seeded row gives the same tokens alone or in any batch (up to
  floating-point ties), with no per-row generator objects.
* Sampling is inverse-CDF over the processed distribution (temperature, then
  top-p renormalized); the returned logprob is the sampled token's under that
  distribution. Temperature 0 is greedy, its logprob taken at temperature 1.
* Finished rows (an end-of-sequence token, a stop string, the length limit)
  leave the batch, so the KV cache shrinks as rows finish.
"""

from __future__ import annotations

import inspect
import secrets
from dataclasses import dataclass, field
from typing import Any

import torch

from trajkit.models.base import sample_seed

_M32 = 0xFFFFFFFF
_MUL = 0x45D9F3B


@dataclass(frozen=True)
class Row:
    """One sample to draw: a prompt and its sampling settings."""

    prompt: tuple[int, ...]
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0  # 64-bit
    stop: tuple[str, ...] = ()


@dataclass
class RowOutput:
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "length"  # stop or length
    stop_string: str | None = None  # the stop string that ended the row


def row_seed(seed: int | None, index: int) -> int:
    """The seed of sample ``index`` of a request: ``base.sample_seed`` (without a request seed, a random 64-bit one)."""
    if seed is None:
        return secrets.randbits(64)
    return sample_seed(seed, index)


def _mix32_int(x: int) -> int:
    x = (((x >> 16) ^ x) * _MUL) & _M32
    x = (((x >> 16) ^ x) * _MUL) & _M32
    return (x >> 16) ^ x


def _mix32(x: torch.Tensor) -> torch.Tensor:
    # int64 arithmetic on 32-bit values: the products stay below 2**59, no overflow
    x = (((x >> 16) ^ x) * _MUL) & _M32
    x = (((x >> 16) ^ x) * _MUL) & _M32
    return (x >> 16) ^ x


def seed_state(seed: int) -> int:
    """A row's 32-bit hash state from its 64-bit seed."""
    return _mix32_int((seed & _M32) ^ _mix32_int((seed >> 32) & _M32))


def uniforms(states: torch.Tensor, steps: int) -> torch.Tensor:
    """``[rows, steps]`` uniform numbers in (0, 1): the draw of each row at each decode step."""
    c = [_mix32_int((step * 0x9E3779B9 + 0x7F4A7C15) & _M32) for step in range(steps)]
    mixed = _mix32(states[:, None] ^ torch.tensor(c, dtype=torch.long, device=states.device)[None, :])
    return ((mixed.double() + 0.5) / 2.0**32).float()


@dataclass(frozen=True)
class Modes:
    """Which sampling paths a batch needs, known on the host so no step waits for the device to decide."""

    all_greedy: bool
    any_greedy: bool
    nucleus: bool

    @classmethod
    def of(cls, rows: list[Row]) -> Modes:
        greedy = [r.temperature <= 0 for r in rows]
        return cls(all(greedy), any(greedy), any(r.top_p < 1 and r.temperature > 0 for r in rows))


def sample(
    logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor, u: torch.Tensor, modes: Modes
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens and their logprobs for a batch of next-token logits ``[rows, vocab]``."""
    logits = logits.float()
    if modes.all_greedy:
        logp = torch.log_softmax(logits, dim=-1)
        token = logits.argmax(dim=-1, keepdim=True)
        return token.squeeze(-1), logp.gather(-1, token).squeeze(-1)
    greedy = temperature <= 0
    t = torch.where(greedy, torch.ones_like(temperature), temperature)
    logp = torch.log_softmax(logits / t[:, None], dim=-1)
    order = None
    if modes.nucleus:
        logp, order = logp.sort(dim=-1, descending=True)
        probs = logp.exp()
        mass_before = probs.cumsum(dim=-1) - probs
        logp = logp.masked_fill(mass_before >= top_p[:, None], float("-inf"))
        logp = logp - torch.logsumexp(logp, dim=-1, keepdim=True)
    cdf = logp.exp().cumsum(dim=-1)
    target = (u.to(cdf.dtype) * cdf[:, -1]).unsqueeze(-1)
    pos = torch.searchsorted(cdf, target).clamp(max=cdf.shape[-1] - 1)
    lp = logp.gather(-1, pos).squeeze(-1)
    token = (order.gather(-1, pos) if order is not None else pos).squeeze(-1)
    if modes.any_greedy:
        g = logits.argmax(dim=-1, keepdim=True)
        g_lp = torch.log_softmax(logits, dim=-1).gather(-1, g).squeeze(-1)
        token = torch.where(greedy, g.squeeze(-1), token)
        lp = torch.where(greedy, g_lp, lp)
    return token, lp


class Decoder:
    """Runs batches of ``Row`` through a causal LM on one device."""

    def __init__(self, model: Any, tokenizer: Any, eos_ids: set[int], pad_id: int):
        self.model, self.tokenizer = model, tokenizer
        self.eos_ids, self.pad_id = set(eos_ids), pad_id
        self.device = next(model.parameters()).device
        # transformers renamed forward's `past_key_values` to `cache` (5.2x); accept both
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    @torch.inference_mode()
    def run(self, rows: list[Row]) -> list[RowOutput]:
        """Sample every row to its end; outputs in the order of ``rows``."""
        from transformers import DynamicCache

        outputs = [RowOutput() for _ in rows]
        live = [i for i, r in enumerate(rows) if r.max_tokens > 0]
        if not live:
            return outputs
        dev = self.device
        unique: dict[tuple[int, ...], int] = {}
        which = [unique.setdefault(rows[i].prompt, len(unique)) for i in live]
        width = max(len(p) for p in unique)
        ids = torch.full((len(unique), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(unique), width), dtype=torch.long)
        for k, prompt in enumerate(unique):
            if not prompt:
                raise ValueError("empty prompt")
            ids[k, width - len(prompt) :] = torch.tensor(prompt)
            mask[k, width - len(prompt) :] = 1
        ids, mask = ids.to(dev), mask.to(dev)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache(config=self.model.config)
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            **{self._cache_kw: cache},
            use_cache=True,
            logits_to_keep=1,
        )
        logits = out.logits[:, -1, :]
        if which != list(range(len(unique))):
            select = torch.tensor(which, device=dev)
            cache.batch_select_indices(select)
            logits, mask, positions = logits[select], mask[select], positions[select]
        next_pos = positions[:, -1] + 1
        temperature = torch.tensor([rows[i].temperature for i in live], dtype=torch.float32, device=dev)
        top_p = torch.tensor([rows[i].top_p for i in live], dtype=torch.float32, device=dev)
        states = torch.tensor([seed_state(rows[i].seed) for i in live], dtype=torch.long, device=dev)
        draws = uniforms(states, max(rows[i].max_tokens for i in live))
        active = list(live)
        modes = Modes.of([rows[i] for i in active])
        step = 0
        while True:
            token, lp = sample(logits, temperature, top_p, draws[:, step], modes)
            sampled, logprobs = torch.stack((token.double(), lp.double())).tolist()  # one transfer a step
            keep = [
                j
                for j, (r, t, p) in enumerate(zip(active, sampled, logprobs))
                if self._append(rows[r], outputs[r], int(t), p)
            ]
            if not keep:
                return outputs
            if len(keep) < len(active):
                select = torch.tensor(keep, device=dev)
                cache.batch_select_indices(select)
                mask, next_pos, token = mask[select], next_pos[select], token[select]
                temperature, top_p, draws = temperature[select], top_p[select], draws[select]
                active = [active[j] for j in keep]
                modes = Modes.of([rows[i] for i in active])
            mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=1)
            out = self.model(
                input_ids=token[:, None],
                attention_mask=mask,
                position_ids=next_pos[:, None],
                **{self._cache_kw: cache},
                use_cache=True,
            )
            logits = out.logits[:, -1, :]
            next_pos = next_pos + 1
            step += 1

    def _append(self, row: Row, output: RowOutput, token: int, logprob: float) -> bool:
        """Record a sampled token; whether the row goes on."""
        output.token_ids.append(token)
        output.logprobs.append(logprob)
        if token in self.eos_ids:
            output.finish_reason = "stop"
            return False
        if row.stop:
            window = 2 * max(len(s) for s in row.stop) + 2
            tail = self.tokenizer.decode(output.token_ids[-window:], skip_special_tokens=False)
            hit = next((s for s in row.stop if s in tail), None)
            if hit is not None:
                output.finish_reason, output.stop_string = "stop", hit
                return False
        if len(output.token_ids) >= row.max_tokens:
            output.finish_reason = "length"
            return False
        return True
