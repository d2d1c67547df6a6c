"""The fast GPU settings learn like fp32: one GRPO step at lr 1e-6 moves the same weights by the same amount."""

from __future__ import annotations

import torch

from bench.grpo_common import one_step_delta, update_parity
from trajkit.train.speed import KERNELS, compile_generation, fast_settings


def test_fast_settings_update_like_fp32_and_pure_bf16_does_not(tiny_model_dir):
    gpu = {k: v for k, v in fast_settings(cuda=True).items() if k != "tf32"}  # TF32 is a CUDA matmul mode
    assert gpu == {"bf16": True} and KERNELS["tf32"]
    fp32 = one_step_delta(tiny_model_dir, None, {"bf16": False})
    changed, mean = update_parity(one_step_delta(tiny_model_dir, None, gpu), fp32)
    assert changed >= 0.99 and abs(mean - 1) <= 0.1, (changed, mean)
    # the fast path before fp32 master weights (dtype: bfloat16): its updates round away
    changed, mean = update_parity(one_step_delta(tiny_model_dir, "bfloat16", gpu), fp32)
    assert changed < 0.5 and mean < 0.5, (changed, mean)


def test_generation_uses_a_bf16_copy_refreshed_after_each_step(tiny_model_dir):
    from types import SimpleNamespace

    from transformers import GenerationConfig

    from trajkit.train.weights import load_model

    policy = load_model(str(tiny_model_dir))
    callbacks = []
    trainer = SimpleNamespace(
        model=policy, generation_config=GenerationConfig(), generation_kwargs={}, add_callback=callbacks.append
    )
    assert compile_generation(trainer)
    twin = trainer.generation_model
    assert next(policy.parameters()).dtype == torch.float32 and next(twin.parameters()).dtype == torch.bfloat16
    assert policy.generate.__self__ is twin and trainer.generation_kwargs == {"cache_implementation": "static"}
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.5)
    callbacks[0].on_step_end(None, None, None)
    for src, dst in zip(policy.parameters(), twin.parameters(), strict=True):
        assert torch.equal(src.to(torch.bfloat16), dst)
