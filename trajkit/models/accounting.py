"""Token and cost accounting into a stage's ``Usage``, with its budget cap.

Each completion carries its own token counts (stages store them per row); this
wrapper adds every call to the stage's ``Usage``, which lands in the manifest.
A prompt is paid once per call, whatever ``n``; cached calls cost nothing. Once
the budget is spent, no new call starts: ``Usage`` raises ``StageStopped`` and
the runner leaves the stage resumable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trajkit.errors import StageStopped, UserError
from trajkit.models.base import DEFAULT_PARAMS, Backend, Completion, Message, SamplingParams, ToolSchema
from trajkit.redact import clean_endpoint
from trajkit.store import atomic_write_json


@dataclass
class Usage:
    """Tokens, calls and cost of one stage, with an optional budget cap.

    ``add`` raises StageStopped once a cap is passed; the runner then flushes
    what was written and leaves the stage resumable.
    """

    max_tokens: int | None = None
    max_cost: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    cached_calls: int = 0
    failed_calls: int = 0  # calls (counted in ``calls``) that got no answer: every completion an error
    failure: str | None = None  # the last failed call's model, endpoint and error
    cost: float = 0.0
    endpoints: dict[str, dict[str, float]] = field(default_factory=dict)  # openai: url -> requests, errors, seconds
    served: dict[str, str] = field(default_factory=dict)  # openai: model name -> what its endpoints report serving
    served_file: Path | None = None  # where the stage keeps ``served`` across resumes
    unreachable: dict[str, str] = field(default_factory=dict)  # openai: "model at url" -> why nothing answered there

    def serving(self, model: str, reported: str) -> None:
        """Record the model an endpoint reports serving (``/v1/models``) for the configured ``model``. A stage
        never mixes models: one its earlier runs recorded otherwise is a user error (the endpoint left the
        config hash, so this is what tells a moved endpoint from another model)."""
        if self.served_file is not None and self.served_file.is_file():
            self.served.update(json.loads(self.served_file.read_text()))
        before = self.served.get(model)
        if before is not None and before != reported:
            raise UserError(
                f"model {model!r}: the endpoint serves {reported!r}, but this stage was run with {before!r}; "
                f"a stage never mixes models: point base_url at a server of {before!r}, or pass --fresh"
            )
        if before is None:
            self.served[model] = reported
            if self.served_file is not None:
                atomic_write_json(self.served_file, self.served)

    def add(self, prompt_tokens: int = 0, completion_tokens: int = 0, cost: float = 0.0, cached: bool = False) -> None:
        if cached:
            self.cached_calls += 1
            return
        self.calls += 1
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        self.cost += cost
        self.check()

    def failed(self, where: str, error: str) -> None:
        """Count a call that got no answer (already counted by ``add``), and keep where and why."""
        self.failed_calls += 1
        self.failure = f"{where}: {error.splitlines()[0] if error.strip() else 'no error text'}"

    def old_answers_only(self) -> str | None:
        """One line when every answered call came from the call cache while a model's endpoint was unreachable:
        the stage "succeeded" on answers kept before, which a changed model or script behind it would not change."""
        if not self.cached_calls or self.calls > self.failed_calls or not self.unreachable:
            return None
        where, why = min(self.unreachable.items())
        return (
            f"every answered model call ({self.cached_calls}) came from the call cache, and {where} is unreachable "
            f"({why}): these are answers kept before (--fresh asks the model again)"
        )

    def check(self) -> None:
        total = self.prompt_tokens + self.completion_tokens
        if self.max_tokens is not None and total > self.max_tokens:
            raise StageStopped(f"token budget reached ({total} > {self.max_tokens})")
        if self.max_cost is not None and self.cost > self.max_cost:
            raise StageStopped(f"cost budget reached ({self.cost:.4f} > {self.max_cost})")

    def as_dict(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "calls": self.calls,
            "cached_calls": self.cached_calls,
            "failed_calls": self.failed_calls,
            "cost": round(self.cost, 6),
            **({"endpoints": _endpoint_summary(self.endpoints)} if self.endpoints else {}),
            **({"served": dict(sorted(self.served.items()))} if self.served else {}),
            **({"unreachable": dict(sorted(self.unreachable.items()))} if self.unreachable else {}),
        }


def _endpoint_summary(endpoints: dict[str, dict[str, float]]) -> dict[str, dict[str, Any]]:
    """Per endpoint (without credentials or query string): requests, errors and mean latency."""
    merged: dict[str, dict[str, float]] = {}
    for url, e in endpoints.items():
        m = merged.setdefault(clean_endpoint(url), {"requests": 0, "errors": 0, "seconds": 0.0})
        for key in m:
            m[key] += e[key]
    return {
        url: {
            "requests": int(e["requests"]),
            "errors": int(e["errors"]),
            "mean_latency_s": round(e["seconds"] / e["requests"], 4) if e["requests"] else None,
        }
        for url, e in sorted(merged.items())
    }


def call_cost(prompt_tokens: int, completion_tokens: int, price_in_per_mtok: float, price_out_per_mtok: float) -> float:
    """The price of one call in the unit the prices are given in."""
    return (prompt_tokens * price_in_per_mtok + completion_tokens * price_out_per_mtok) / 1e6


class AccountedBackend(Backend):
    """A backend that counts each call's tokens and cost into ``usage``."""

    def __init__(self, inner: Backend, usage: Usage):
        super().__init__(inner.spec)
        self.inner, self.usage, self.name = inner, usage, inner.name

    async def generate(
        self, messages: list[Message], tools: list[ToolSchema] | None = None, params: SamplingParams = DEFAULT_PARAMS
    ) -> list[Completion]:
        self.usage.check()
        out = await self.inner.generate(messages, tools, params)
        cached = bool(out) and all(c.cached for c in out)
        prompt = max((c.prompt_tokens for c in out), default=0)
        completion = sum(c.completion_tokens for c in out)
        cost = call_cost(prompt, completion, self.spec.price_input_per_mtok, self.spec.price_output_per_mtok)
        self.usage.add(prompt, completion, cost, cached)
        if out and all(c.error for c in out):
            urls = self.spec.base_url if isinstance(self.spec.base_url, list) else [self.spec.base_url]
            where = self.spec.model + "".join(f" at {clean_endpoint(u)}" for u in urls if u)
            self.usage.failed(where, out[0].error)
        return out

    async def aclose(self) -> None:
        await self.inner.aclose()
