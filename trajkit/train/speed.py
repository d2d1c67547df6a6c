"""trajkit's settings for fast GRPO on a GPU with transformers generation (when vLLM is not used).

Measured by ``bench/grpo_gpu.py`` against TRL's defaults. Two kinds of gain,
reported apart:

* batch shape (``batch_shape``; a GRPO stage's ``generation_steps``): generate
  several optimizer steps' worth of completions in one ``generate`` call
  (decoding is launch-bound, so a bigger batch costs little more per token),
  and train each step as one micro-batch without activation recompute. Prompts
  per step, generations per prompt, completion length and sampling are
  unchanged. The cost: step k of a generation batch trains on completions
  sampled k-1 optimizer steps ago (staleness up to ``generation_steps - 1``);
  TRL's importance-ratio clip bounds the off-policy update, and the stage logs
  the fraction of tokens it clipped (``clip_fraction``) and the staleness.
* kernels (``KERNELS`` and ``compile_generation``): fp32 master weights and
  optimizer state with bf16 autocast for compute, TF32 matmuls, and a bf16 copy
  of the policy for generation with a static KV cache (compiled decode, CUDA
  graphs), refreshed from the fp32 weights after every optimizer step.

Training the weights themselves in bf16 is not one of these settings: at RL
learning rates (1e-6) AdamW's updates round away in bf16 (``bench/grpo_gpu.py
--updates`` measures it).
"""

from __future__ import annotations

import copy
from typing import Any

KERNELS: dict[str, Any] = {"bf16": True, "tf32": True}  # GRPOConfig fields; the weights load in fp32


def fast_settings(cuda: bool) -> dict[str, Any]:
    """The precision fields of ``GRPOConfig`` that ``trajkit train grpo`` and the bench's trajkit variant use."""
    return dict(KERNELS) if cuda else {"bf16": False, "gradient_checkpointing": False}


def batch_shape(completions_per_step: int, steps_per_generation: int = 4) -> dict[str, Any]:
    """``GRPOConfig`` fields: a step's completions as one micro-batch, ``steps_per_generation`` steps per generate."""
    return {
        "per_device_train_batch_size": completions_per_step,
        "gradient_accumulation_steps": 1,
        "steps_per_generation": steps_per_generation,
        "gradient_checkpointing": False,
    }


def compile_generation(trainer: Any, static_cache: bool = True) -> bool:
    """Generate from a bf16 copy of the ``GRPOTrainer``'s policy, with a static KV cache (compiled decode).

    The trained weights stay as they are (fp32 master weights); the copy's
    ``generate`` serves the policy's, and a callback copies the weights into it
    after every optimizer step (in place: a CUDA graph keeps its addresses).
    TRL builds its generation config with ``disable_compile=True``; a static
    cache lets transformers compile the per-token forward. Returns False,
    changing nothing, with vLLM.
    """
    import torch
    from transformers import TrainerCallback

    if getattr(trainer, "use_vllm", False):
        return False
    policy = trainer.model
    if next(policy.parameters()).dtype == torch.bfloat16:
        twin = policy
    else:
        twin = copy.deepcopy(policy).to(torch.bfloat16).eval()
        policy.generate = twin.generate

        class Refresh(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                refresh(policy, twin)

        trainer.add_callback(Refresh())
    trainer.generation_config.disable_compile = False
    if static_cache:
        trainer.generation_config.cache_implementation = "static"
        trainer.generation_kwargs["cache_implementation"] = "static"
    trainer.generation_model = twin
    return True


def refresh(policy: Any, twin: Any) -> None:
    """Copy the policy's current weights into its bf16 generation copy, in place."""
    import torch

    with torch.no_grad():
        for src, dst in zip(policy.parameters(), twin.parameters(), strict=True):
            dst.copy_(src)
