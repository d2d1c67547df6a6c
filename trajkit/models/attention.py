"""A guard for left-padded batches under PyTorch's SDPA: no query row attends to nothing.

transformers 5 builds SDPA masks without its old correction for fully masked
query rows, the left-pad positions of a batch (``allow_torch_fix`` is a no-op
now). On CUDA, SDPA's memory-efficient kernel gives such rows NaN gradients:
on an H200 (torch 2.11, transformers 5.17) one backward pass over a
left-padded batch of a 0.5B-shaped Qwen2 left 280 parameter tensors with
non-finite gradients, and GRPO's next generation died on a device-side assert;
eager attention and unpadded batches were fine. Letting those rows attend to
every key changes no real token's output: a pad position is masked as a key
for every other row and carries no loss. Also reported upstream in
unslothai/unsloth#9848 for forward passes.
"""

from __future__ import annotations

from typing import Any

_installed = False


def guard_sdpa_padding() -> None:
    """Make transformers' SDPA masks give every fully masked query row all keys (idempotent, process-wide)."""
    global _installed
    if _installed:
        return
    import torch
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    def sdpa_mask_without_empty_rows(*args: Any, **kwargs: Any) -> Any:
        mask = sdpa_mask(*args, **kwargs)
        if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool:
            mask = mask | ~mask.any(dim=-1, keepdim=True)
        return mask

    AttentionMaskInterface.register("sdpa", sdpa_mask_without_empty_rows)
    _installed = True
