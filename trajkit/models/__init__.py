"""trajkit.models: generation backends behind one async interface, the call cache, accounting.

Stages get a backend with ``ctx.backend(cfg.model)`` (``make_backend`` with the stage's usage,
call cache and redactor) and call ``await backend.generate(messages, tools, SamplingParams(...))``. This
module stays light (the CLI imports it); backends import torch, httpx or vLLM
when they are built.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trajkit.models.accounting import Usage
    from trajkit.models.base import (
        Backend,
        Completion,
        Message,
        ModelSpec,
        SamplingParams,
        ToolCall,
        ToolCallError,
        ToolSchema,
    )
    from trajkit.redact import Redactor

__all__ = [
    "Backend",
    "Completion",
    "Message",
    "ModelSpec",
    "SamplingParams",
    "ToolCall",
    "ToolCallError",
    "ToolSchema",
    "make_backend",
]


def __getattr__(name: str) -> Any:
    """The interface types, imported from ``base`` on first use (pydantic stays out of ``trajkit --help``)."""
    if name in __all__:
        from trajkit.models import base

        return getattr(base, name)
    raise AttributeError(f"module 'trajkit.models' has no attribute {name!r}")


def make_backend(
    spec: ModelSpec, usage: Usage | None = None, cache_dir: Path | None = None, redactor: Redactor | None = None
) -> Backend:
    """The backend for ``spec.backend``, behind the call cache and token/cost accounting.

    The cache is used when ``spec.cache`` and a ``cache_dir`` are given (see
    ``trajkit.models.cache`` for what a key holds; entries go through ``redactor``,
    a stage's: ``StageContext.backend`` passes it); every call, cached or not,
    is counted into ``usage`` (see ``trajkit.models.accounting``). Nothing is
    loaded until the first call; an ``openai`` endpoint is asked which model it
    serves (recorded into ``usage``, which refuses a stage that mixes models).
    """
    if spec.backend == "transformers":
        from trajkit.models.transformers_backend import TransformersBackend as cls
    elif spec.backend == "openai":
        from trajkit.models.openai_backend import OpenAIBackend as cls
    else:
        from trajkit.models.vllm_backend import VLLMBackend as cls
    backend: Backend = cls(spec, stats=usage.endpoints if usage else None) if spec.backend == "openai" else cls(spec)
    if spec.backend == "openai" and usage is not None:
        _record_served(backend, usage)
    if spec.cache and cache_dir is not None:
        from trajkit.models.cache import CachedBackend, CallCache

        backend = CachedBackend(backend, CallCache(Path(cache_dir), redactor))
    if usage is not None:
        from trajkit.models.accounting import AccountedBackend

        backend = AccountedBackend(backend, usage)
    return backend


def _record_served(backend: Any, usage: Usage) -> None:
    """Record the model the endpoints report serving; endpoints of one spec serving different models, or a
    model other than the stage's earlier runs had, are user errors (before any request)."""
    from trajkit.errors import UserError

    served = backend.served()
    if len(set(served.values())) > 1:
        listed = "; ".join(f"{url}: {model}" for url, model in sorted(served.items()))
        raise UserError(f"model {backend.spec.model!r}: the endpoints serve different models ({listed})")
    for reported in set(served.values()):
        usage.serving(backend.spec.model, reported)
