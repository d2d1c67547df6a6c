"""The SDPA padding guard: no fully masked query row, and no real token's output changes."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

from trajkit.models.attention import guard_sdpa_padding


def left_padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(10, 500, (3, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :4] = 0
    mask[2, :9] = 0
    return ids, mask


def test_guarded_sdpa_mask_has_no_empty_rows_and_keeps_the_others():
    _, padding = left_padded_batch()
    guard_sdpa_padding()
    guard_sdpa_padding()  # idempotent
    mask = ALL_MASK_ATTENTION_FUNCTIONS["sdpa"](batch_size=3, q_length=12, kv_length=12, attention_mask=padding.bool())
    assert mask.any(dim=-1).all()
    causal = torch.ones(12, 12, dtype=torch.bool).tril()
    plain = causal & padding.bool()[:, None, None, :]
    real_rows = padding.bool()[:, None, :, None].expand_as(plain)
    assert torch.equal(mask[real_rows], plain[real_rows])  # rows of real tokens are untouched


def test_guarded_sdpa_matches_eager_on_real_tokens_and_gradients_are_finite(tiny_model_dir):
    ids, padding = left_padded_batch()
    guard_sdpa_padding()
    logits = {}
    for attn in ("sdpa", "eager"):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation=attn)
        out = model(input_ids=ids, attention_mask=padding).logits
        logits[attn] = out[padding.bool()]
        if attn == "sdpa":
            out[padding.bool()].logsumexp(-1).sum().backward()
            assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert torch.allclose(logits["sdpa"], logits["eager"], atol=1e-4)
