"""Token and cost accounting into a stage's ``Usage``, with its budget cap.

Each completion carries its own token counts (stages store them per row); this
wrapper adds every call to the stage's ``Usage``, which lands in the manifest.
A prompt is paid once per call, whatever ``n``; cached calls cost nothing. Once
the budget is spent, no new call starts: ``Usage`` raises ``StageStopped`` and
the runner leaves the stage resumable.
"""

from __future__ import annotations

from trajkit.models.base import DEFAULT_PARAMS, Backend, Completion, Message, SamplingParams, ToolSchema
from trajkit.runner import Usage


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
        return out

    async def aclose(self) -> None:
        await self.inner.aclose()
