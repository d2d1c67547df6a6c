"""Serve a recorded run's model calls again: a stand-in model with no weights (``trajkit model serve --replay``).

A stage's calls are kept in the run's call cache (``RUN/_cache/calls.sqlite``,
see ``trajkit.models.cache``), keyed by the model, the conversation, the tools,
the sampling parameters and the request options. ``ReplayServer`` is an
OpenAI-compatible server on loopback that computes the same key from each
request and answers with the completions recorded under it, so the pipeline
that made the run can be run again end to end (into another run directory,
or after changing a later stage) without the model. A local model directory
is found by the identity its calls were recorded with (its path and weights'
fingerprint, kept beside each call), so the directory need not be there, and
one inside the recorded run (``${run}/models/sft``) answers to the same place
inside another run (the pipeline rerun into a new directory); the
openai backend sends the spec's ``chat_template_kwargs`` as the request field
of that name, which the key counts as the spec's (or, failing that, as
``extra_body``'s); a request carrying tool results' media as a user message
(``tool_media: user_message``) is keyed with that option. A request that was never recorded is refused with 404 and
says why: the client records it as a failed call, as it would any endpoint's
error. ``/v1/models`` lists the recorded models. Another agent's calls recorded by
``model serve --record`` replay too: ``curate traces`` puts them into the run's
call cache under the key ``request_call`` makes of each request, with each
answer as it was returned (a stream is answered as a stream).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from trajkit.errors import UserError
from trajkit.models.base import Completion, Message, ModelSpec, SamplingParams
from trajkit.models.cache import CallCache, call_key, model_identity
from trajkit.models.chat import canonical
from trajkit.models.scripted_server import Refused, ScriptedServer

# request fields the openai backend sets itself; any other field came from the spec's ``extra_body``
_STANDARD = {"model", "messages", "n", "temperature", "top_p", "max_tokens", "tools", "stop", "seed", "logprobs"}


def open_cache(path: str | Path) -> CallCache:
    """The call cache of a run directory (its ``_cache``), of a cache directory, or a ``calls.sqlite`` file."""
    path = Path(path)
    for candidate in (path / "_cache" / "calls.sqlite", path / "calls.sqlite", path):
        if candidate.is_file() and candidate.name == "calls.sqlite":
            return CallCache(candidate.parent)
    raise UserError(f"--replay {path}: no recorded calls there (a run directory, its _cache, or calls.sqlite)")


class ReplayServer(ScriptedServer):
    """An OpenAI-compatible server answering each request with the completions a recorded call cache holds."""

    def __init__(self, cache: CallCache, delay_s: float = 0.0, port: int = 0):
        self.cache = cache
        models = list(cache.models())
        if not models:
            raise UserError(f"{cache.path}: the call cache holds no calls to replay")
        self.models = models
        self._known: dict[str, list[str]] = {}
        # the recorded run, where the cache is its _cache: models inside it are found inside another run too
        self.run = Path(os.path.abspath(cache.path.parent.parent)) if cache.path.parent.name == "_cache" else None
        super().__init__(self._never, delay_s=delay_s, model=models[0], port=port)

    @staticmethod
    def _never(messages: Any, tools: Any, body: Any) -> str:
        raise AssertionError("a replay answers whole requests")

    def served_models(self) -> list[str]:
        return self.models

    def notes(self) -> list[str]:
        """What cannot be replayed, said once at serve start: calls recorded without their model's identity."""
        out = []
        for model in self.models:
            if None in self.cache.identities(model):
                out.append(
                    f"note: calls of {model!r} were recorded before the cache kept each model's identity: if "
                    f"{model!r} was a local model directory, they replay only where that path holds the same "
                    "weights and tokenizer"
                )
        return out

    def _recorded_name(self, model: str) -> str:
        """The recorded model name a request's stands for: itself, or for a model inside the recorded run
        (``${run}/models/sft``) the same place inside another run: the pipeline rerun into a new directory."""
        if model in self.models or self.run is None:
            return model
        inside = []
        for name in self.models:
            path = Path(os.path.abspath(name))
            if path.is_relative_to(self.run) and path != self.run:
                rel = path.relative_to(self.run).parts
                if Path(model).parts[-len(rel) :] == rel:
                    inside.append(name)
        return inside[0] if len(inside) == 1 else model

    def _identities(self, model: str) -> list[str]:
        """The identities to look the request up under: those recorded for this model name, newest first, and
        the name's own (a Hub id; a local directory's path and fingerprint here) for calls recorded without one."""
        if model not in self._known:
            recorded = self.cache.identities(self._recorded_name(model))
            here = [model_identity(model)] if None in recorded or not recorded else []
            self._known[model] = list(dict.fromkeys([i for i in recorded if i is not None] + here))
        return self._known[model]

    def _complete(self, body: dict[str, Any], index: int) -> dict[str, Any]:
        model, messages, params, spec = request_call(body)
        specs = [spec]
        extra = spec.extra_body
        if isinstance(extra.get("chat_template_kwargs"), dict):  # the spec's chat_template_kwargs, as sent
            rest = {k: v for k, v in extra.items() if k != "chat_template_kwargs"}
            kwargs = extra["chat_template_kwargs"]
            specs.insert(0, spec.model_copy(update={"extra_body": rest, "chat_template_kwargs": kwargs}))
        if any(m.get("role") == "user" and isinstance(m.get("content"), list) for m in messages):
            specs += [s.model_copy(update={"tool_media": "user_message"}) for s in specs]  # tool results' media
        for identity in self._identities(model):
            for spec in specs:
                recorded = self.cache.get(call_key(identity, messages, body.get("tools"), params, spec))
                if recorded is not None:
                    return _response(recorded, model, index)
        if self._recorded_name(model) not in self.models:
            raise Refused(
                404,
                f"no recorded answer: {model!r} was never recorded in {self.cache.path} "
                f"(recorded: {', '.join(map(repr, self.models))})",
            )
        raise Refused(
            404,
            f"no recorded answer for this request to {model!r} in {self.cache.path}: no recorded call has this "
            "conversation, tools, sampling parameters and options",
        )


def request_call(body: dict[str, Any]) -> tuple[str, list[Message], SamplingParams, ModelSpec]:
    """What a chat completion request asks for, as the call cache keys a call (``call_key``): the model name,
    the canonical messages, the sampling parameters and a spec holding the other request fields. A replay looks
    requests up by it; ``curate traces`` keys a recorded call by it, so the recording replays."""
    model = str(body.get("model") or "")
    params = SamplingParams(
        n=int(body.get("n") or 1),
        temperature=body.get("temperature", 1.0),
        top_p=body.get("top_p", 1.0),
        max_tokens=body.get("max_tokens", 256),
        stop=tuple(body["stop"]) if body.get("stop") else None,
        seed=body.get("seed"),
    )
    extra = {k: v for k, v in body.items() if k not in _STANDARD}
    spec = ModelSpec(model=model, backend="openai", logprobs=bool(body.get("logprobs")), extra_body=extra)
    return model, canonical(body.get("messages") or []), params, spec


def _response(completions: list[Completion], model: str, index: int) -> dict[str, Any]:
    """Recorded completions as a chat completion response (what the openai backend parses them back from)."""
    choices, prompt_ids = [], None
    for i, c in enumerate(completions):
        calls = [
            {"id": t.id, "type": "function", "function": {"name": t.name, "arguments": t.arguments}}
            for t in c.tool_calls
        ]
        text = c.text
        for error in c.tool_call_errors:  # unusable calls go back as they came, so the client finds them again
            try:
                calls.append(json.loads(error.raw))  # a structured call (its JSON entry)
            except ValueError:
                text += error.raw  # a <tool_call> block of the text
        message: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}  # as the API
        if c.reasoning is not None:
            message["reasoning_content"] = c.reasoning
        if calls:
            message["tool_calls"] = calls
        choice: dict[str, Any] = {"index": i, "message": message, "finish_reason": c.finish_reason, "logprobs": None}
        if c.logprobs is not None:
            choice["logprobs"] = {"content": [{"token": "", "logprob": x} for x in c.logprobs]}
        if c.token_ids is not None:
            choice["token_ids"] = c.token_ids
        prompt_ids = c.prompt_token_ids or prompt_ids
        choices.append(choice)
    prompt = max((c.prompt_tokens for c in completions), default=0)
    completion = sum(c.completion_tokens for c in completions)
    return {
        **({"prompt_token_ids": prompt_ids} if prompt_ids is not None else {}),
        "id": f"chatcmpl-replay-{index}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }
