"""trajkit's settings for fast GRPO generation with transformers on a GPU (when vLLM is not used).

Measured by ``bench/grpo_gpu.py`` against TRL's defaults. Two kinds of gain,
reported apart:

* batch shape (``BATCH_SHAPE``): generate several optimizer steps' worth of
  completions in one ``generate`` call (decoding is launch-bound, so a bigger
  batch costs little more per token), and train each step as one micro-batch
  without activation recompute. Prompts per step, generations per prompt,
  completion length and sampling are unchanged.
* kernels (``compile_generation``, bf16 weights, TF32): a static KV cache so
  transformers compiles the decode step (CUDA graphs), bf16 matmuls.
"""

from __future__ import annotations

from typing import Any


def batch_shape(prompts_per_step: int, num_generations: int, steps_per_generation: int = 4) -> dict[str, Any]:
    """``GRPOConfig`` fields: one micro-batch of a step's completions, ``steps_per_generation`` steps per generate."""
    return {
        "per_device_train_batch_size": prompts_per_step * num_generations,
        "gradient_accumulation_steps": 1,
        "steps_per_generation": steps_per_generation,
        "gradient_checkpointing": False,
        "pad_to_multiple_of": 64,
    }


KERNELS: dict[str, Any] = {"tf32": True}


def compile_generation(trainer: Any) -> None:
    """Make a ``GRPOTrainer``'s transformers generation use a static KV cache and a compiled decode step.

    TRL builds its generation config with ``disable_compile=True``; on CUDA a
    static cache lets transformers compile the per-token forward (CUDA graphs),
    the main cost of launch-bound decoding. A no-op with vLLM.
    """
    if getattr(trainer, "use_vllm", False):
        return
    trainer.generation_config.cache_implementation = "static"
    trainer.generation_config.disable_compile = False
    trainer.generation_kwargs["cache_implementation"] = "static"
