"""The one async interface every generation backend implements.

Chat messages (OpenAI format) and tool schemas in; completions out: text,
parsed tool calls (malformed ones kept as errors with the raw text), finish
reason, token counts, and where the backend gives them the prompt and
completion token ids and the logprobs of the sampled tokens.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from trajkit.config import StageConfig, Unhashed
from trajkit.schema import seed_for

Message = dict[str, Any]  # {"role", "content", "tool_calls"?, "tool_call_id"?, "name"?, "reasoning_content"?}
ToolSchema = dict[str, Any]  # {"type": "function", "function": {"name", "description", "parameters"}}


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    stop: tuple[str, ...] | None = None
    seed: int | None = None

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stop"] = list(self.stop) if self.stop else None
        return d


DEFAULT_PARAMS = SamplingParams()


def sample_seed(seed: int | None, index: int) -> int | None:
    """The seed of sample ``index`` of a request seeded with ``seed`` (None without a request seed).

    Every local backend (transformers, vllm) seeds sample j of an ``n``-sample
    request this one way, ``schema.seed_for(seed, j)``, so a sample does not
    depend on how many others were asked for with it.
    """
    return None if seed is None else seed_for(seed, index)


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text of an object


@dataclass(frozen=True)
class ToolCallError:
    """A tool call the model tried to make that could not be used; the raw text is kept."""

    raw: str
    reason: str
    code: str = "malformed_call"  # a trajkit.schema.REASON_CODES value: malformed_call, unknown_tool, bad_arguments


@dataclass
class Completion:
    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_errors: list[ToolCallError] = field(default_factory=list)
    reasoning: str | None = None
    finish_reason: str = "stop"  # stop, length, tool_calls, error
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_token_ids: list[int] | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    cached: bool = False
    error: str | None = None  # a failed request, as data (the run goes on)

    def message(self) -> Message:
        """The assistant message this completion adds to a conversation."""
        return {
            "role": "assistant",
            "content": self.text,
            "reasoning_content": self.reasoning,
            "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls] or None,
        }


def model_path(model: str) -> str:
    """A local model directory as an absolute path, so that a run's rows name it from anywhere (the viewer
    finds its tokenizer, a replay its weights, whatever folder they are opened from); any other model (a Hub
    id) as given. A local directory is one that exists, or a name no Hub id can be (``org/name``): one that
    starts with ``/``, ``.`` or ``~``, or has more than two parts (``runs/x/models/sft``, made by a stage)."""
    import os

    if not model or "://" in model:
        return model
    expanded = os.path.expanduser(model)
    if os.path.isdir(expanded) or model.startswith(("/", ".", "~")) or len(model.strip("/").split("/")) > 2:
        return os.path.abspath(expanded)
    return model


class ModelSpec(StageConfig):
    """Which model to call and how: shared by every stage that generates."""

    model: str = Field(
        description="Local model directory (kept as its absolute path), Hub id, or the served model name."
    )
    backend: Literal["transformers", "openai", "vllm"] = "transformers"
    base_url: Unhashed[str | list[str] | None] = Field(
        None,
        description="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1, or a list of endpoints serving the "
        "same model (requests go to the least loaded one).",
    )
    endpoint_backoff_s: Unhashed[float] = Field(
        5.0, ge=0, description="openai: seconds a failing endpoint is left out."
    )
    api_key_env: Unhashed[str | None] = Field("OPENAI_API_KEY", description="Environment variable holding the API key.")
    headers_env: Unhashed[dict[str, str]] = Field(
        default_factory=dict, description="Header name -> environment variable."
    )
    device: str | None = Field(None, description="transformers: cpu, cuda, ... (default: cuda if available).")
    dtype: str | None = Field(None, description="transformers/vllm: float32, bfloat16, ...")
    max_batch_size: Unhashed[int] = Field(64, ge=1, description="transformers: largest batch.")
    max_concurrency: Unhashed[int] = Field(16, ge=1, description="openai: requests in flight.")
    requests_per_minute: Unhashed[float | None] = Field(None, gt=0)
    tokens_per_minute: Unhashed[float | None] = Field(None, gt=0)
    timeout_s: Unhashed[float] = Field(120.0, gt=0)
    max_retries: Unhashed[int] = Field(5, ge=0)
    price_input_per_mtok: float = Field(0.0, ge=0, description="Cost per million prompt tokens.")
    price_output_per_mtok: float = Field(0.0, ge=0, description="Cost per million completion tokens.")
    cache: Unhashed[bool] = Field(True, description="Use the persistent call cache.")
    engine_args: dict[str, Any] = Field(default_factory=dict, description="vllm: extra LLM(...) arguments.")
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra chat-template variables, e.g. enable_thinking (openai: sent as the request's "
        "chat_template_kwargs, which vLLM and SGLang read).",
    )
    logprobs: bool = Field(False, description="openai: ask the server for the logprobs of sampled tokens.")
    extra_body: dict[str, Any] = Field(
        default_factory=dict, description="openai: extra request fields, e.g. vLLM's return_token_ids."
    )
    retry_backoff_s: Unhashed[float] = Field(0.5, ge=0, description="openai: first retry delay, doubled per attempt.")
    tool_media: Literal["text", "user_message"] = Field(
        "text",
        description="openai: how tool results' images and audio reach the model. text: the tool message's text "
        "alone, which names them. user_message: also a user message after the tool messages carrying them as "
        "image_url / input_audio parts (tool messages take text only), for a vision or audio model.",
    )

    @model_validator(mode="after")
    def _local_path(self) -> ModelSpec:
        if self.backend != "openai":  # (openai's model is the name an endpoint serves, never a path)
            self.model = model_path(self.model)
        return self

    @model_validator(mode="after")
    def _media_over_http(self) -> ModelSpec:
        if self.tool_media != "text" and self.backend != "openai":
            raise ValueError(f"tool_media {self.tool_media!r} is for the openai backend, not {self.backend!r}")
        return self

    @field_validator("base_url")
    @classmethod
    def _http(cls, value: str | list[str] | None) -> str | list[str] | None:
        """Each endpoint an http(s) URL with a host: ``localhost:8000`` (no scheme) failed every request."""
        from urllib.parse import urlsplit

        for url in [value] if isinstance(value, str) else value or []:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"{url!r} is not an http(s) URL, e.g. http://localhost:8000/v1")
        return value


class Backend:
    """Base class of backends. Subclasses implement ``_generate`` for one conversation."""

    name: str = "base"

    def __init__(self, spec: ModelSpec):
        self.spec = spec
        self.model = spec.model

    @classmethod
    def build(cls, spec: ModelSpec, usage: Any = None) -> Backend:
        """The backend ``make_backend`` makes for ``spec``; one that reports into a stage's ``usage`` (its
        ``models.accounting.Usage``: endpoints, the model they serve) overrides this."""
        return cls(spec)

    async def generate(
        self, messages: list[Message], tools: list[ToolSchema] | None = None, params: SamplingParams = SamplingParams()
    ) -> list[Completion]:
        """``params.n`` independent completions of one conversation."""
        return await self._generate(messages, tools, params)

    async def generate_batch(
        self,
        conversations: list[list[Message]],
        tools: list[ToolSchema] | None = None,
        params: SamplingParams = SamplingParams(),
    ) -> list[list[Completion]]:
        """Completions for many conversations; backends batch concurrent requests."""
        return list(await asyncio.gather(*(self.generate(c, tools, params) for c in conversations)))

    async def _generate(
        self, messages: list[Message], tools: list[ToolSchema] | None, params: SamplingParams
    ) -> list[Completion]:
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release resources (HTTP clients, engines)."""
