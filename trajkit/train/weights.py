"""Loading a stage's model and tokenizer, and saving full safetensors weights, sharded or not.

A stage's weights are a plain Hugging Face directory (``config.json``,
``model.safetensors``, tokenizer files): the next curriculum stage, ``eval`` and
vLLM load it as is. Under FSDP2 the parameters are DTensors; ``save_weights``
gathers the full state dict (every rank takes part) and rank 0 writes it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trajkit.errors import UserError


def resolve_model(path: str) -> str:
    """A local directory, or a Hub id when the Hub is reachable; one clear line otherwise."""
    if Path(path).exists():
        if not (Path(path) / "config.json").is_file():
            raise UserError(f"model directory {path} has no config.json")
        return str(Path(path))
    if os.environ.get("HF_HUB_OFFLINE") == "1" or "/" not in path:
        raise UserError(f"model {path!r} is not a local directory (and the Hub is offline or it is no Hub id)")
    return path


def load_tokenizer(path: str) -> Any:
    """The tokenizer, left-padded (as GRPO generation needs), with a pad token."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model(path), padding_side="left", truncation_side="left")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(path: str, dtype: str | None = None) -> Any:
    """A causal LM in float32 unless ``dtype`` is given (mixed precision comes from the trainer)."""
    import torch
    from transformers import AutoModelForCausalLM

    from trajkit.models.attention import guard_sdpa_padding
    from trajkit.models.heap import keep_freed_memory

    guard_sdpa_padding()
    keep_freed_memory()
    torch_dtype = getattr(torch, dtype) if dtype else torch.float32
    return AutoModelForCausalLM.from_pretrained(resolve_model(path), dtype=torch_dtype)


def full_state_dict(model: Any) -> dict[str, Any]:
    """The model's full, unsharded state dict on CPU; a collective when parameters are DTensors.

    Tied parameters (one parameter under several names, e.g. the LM head and the
    input embeddings) stay one tensor, so safetensors writes them once: copying
    each name to the CPU on its own would store a GPU model's embeddings twice.
    """
    from torch.distributed.tensor import DTensor

    if any(isinstance(p, DTensor) for p in model.parameters()):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    else:
        state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    owner: dict[int, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        first = owner.setdefault(id(param), name)
        if first != name and first in state and name in state:
            state[name] = state[first]
    return state


def save_weights(model: Any, tokenizer: Any, out_dir: str | Path, is_main: bool = True) -> Path:
    """Write full safetensors weights, the config and the tokenizer to ``out_dir`` (rank 0 writes).

    Call it on every rank when the model is sharded: gathering is collective.
    """
    out = Path(out_dir)
    state = full_state_dict(model)
    if is_main:
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out, state_dict=state, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(out)
    return out
