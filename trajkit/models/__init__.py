"""trajkit.models: generation backends behind one async interface, the call cache, accounting.

Stages get a backend with ``ctx.backend(cfg.model)`` (``make_backend`` with the stage's usage,
call cache and redactor) and call ``await backend.generate(messages, tools, SamplingParams(...))``. This
module stays light (the CLI imports it); backends import torch, httpx or vLLM
when they are built.
"""

from __future__ import annotations

import importlib
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


# backend -> "module:Class" (a ``Backend``), imported only when used: a registry, like ``trajkit.stages``;
# ``ModelSpec.backend`` names one of these
BACKENDS: dict[str, str] = {
    "transformers": "trajkit.models.transformers_backend:TransformersBackend",
    "openai": "trajkit.models.openai_backend:OpenAIBackend",
    "vllm": "trajkit.models.vllm_backend:VLLMBackend",
}


def backend_class(name: str) -> type[Backend]:
    """The ``Backend`` class registered as ``name``."""
    module, _, attr = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def make_backend(
    spec: ModelSpec,
    usage: Usage | None = None,
    cache_dir: Path | None = None,
    redactor: Redactor | None = None,
    cache_since: float | None = None,
) -> Backend:
    """The backend for ``spec.backend`` (``BACKENDS``), behind the call cache and token/cost accounting.

    The cache is used when ``spec.cache`` and a ``cache_dir`` are given (see
    ``trajkit.models.cache`` for what a key holds; entries go through ``redactor``,
    a stage's: ``StageContext.backend`` passes it; answers kept before ``cache_since`` are not reused: a stage
    run ``--fresh``); every call, cached or not,
    is counted into ``usage`` (see ``trajkit.models.accounting``). Nothing is
    loaded until the first call; an ``openai`` endpoint is asked which model it
    serves (recorded into ``usage``, which refuses a stage that mixes models).
    """
    backend = backend_class(spec.backend).build(spec, usage)
    if spec.cache and cache_dir is not None:
        from trajkit.models.cache import CachedBackend, CallCache

        backend = CachedBackend(backend, CallCache(Path(cache_dir), redactor, cache_since))
    if usage is not None:
        from trajkit.models.accounting import AccountedBackend

        backend = AccountedBackend(backend, usage)
    return backend
