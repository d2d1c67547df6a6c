"""Conversations in the three shapes trajkit meets them.

trajkit stores messages with flat tool calls (``{"id", "name", "arguments"}``,
arguments as JSON text; ``stored_message``); OpenAI endpoints want them nested under
``function`` with ``type``; Hugging Face chat templates want them nested with
the arguments as an object (so ``tojson`` renders them like the model wrote
them). Stages may pass either flat or nested calls.
"""

from __future__ import annotations

import json
from typing import Any

from trajkit.models.base import Completion, Message, ToolSchema
from trajkit.models.parsing import parse_tool_calls, split_reasoning
from trajkit.redact import REDACTED

_FIELDS = ("role", "content", "reasoning_content", "tool_calls", "tool_call_id", "name")


def _flat_call(call: dict[str, Any]) -> dict[str, Any]:
    fn = call.get("function") if isinstance(call.get("function"), dict) else call
    args = fn.get("arguments")
    if not isinstance(args, str):
        args = json.dumps(args if args is not None else {}, ensure_ascii=False)
    return {"id": call.get("id"), "name": fn.get("name"), "arguments": args}


def stored_message(m: Message) -> Message:
    """A message in the ``trajectories`` shape: all seven keys (None where empty), tool calls flat with
    JSON-text arguments (None without calls). ``parts`` (a tool result's image and audio content, see
    ``envs.session.media_part``) is stored; a model sees it only through ``with_tool_media``."""
    out = {k: m.get(k) for k in _FIELDS}
    out["tool_calls"] = [_flat_call(tc) for tc in m["tool_calls"]] if m.get("tool_calls") else None
    out["parts"] = m.get("parts") or None
    return out


def canonical(messages: list[Message]) -> list[Message]:
    """Messages in trajkit's stored shape with empty fields dropped: the form that cache keys hash."""
    out = []
    for m in messages:
        c: dict[str, Any] = {k: m[k] for k in _FIELDS if m.get(k) is not None and k != "tool_calls"}
        if m.get("tool_calls"):
            c["tool_calls"] = [_flat_call(tc) for tc in m["tool_calls"]]
        out.append(c)
    return out


_AUDIO_FORMATS = {
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
}


def _media_content(part: dict[str, Any]) -> dict[str, Any] | None:
    """A stored media part as an OpenAI content part; None for one without data (over the size cap, or
    redacted: a secret inside it) or audio in a format the API does not take (wav and mp3 only)."""
    if part.get("data") in (None, "", REDACTED):
        return None
    if part.get("type") == "image":
        return {"type": "image_url", "image_url": {"url": f"data:{part['mime_type']};base64,{part['data']}"}}
    audio = _AUDIO_FORMATS.get(part.get("mime_type") or "")
    if part.get("type") == "audio" and audio:
        return {"type": "input_audio", "input_audio": {"data": part["data"], "format": audio}}
    return None


def with_tool_media(messages: list[Message]) -> list[Message]:
    """``messages`` with a user message after each run of tool results whose ``parts`` hold images or audio,
    carrying them as content parts, each group after a line naming its tool call (OpenAI tool messages take
    text only; the model spec's ``tool_media: user_message``). Parts that ``_media_content`` cannot send stay
    named in the tool message's text alone."""
    out: list[Message] = []
    pending: list[dict[str, Any]] = []
    for m in [*messages, None]:
        if pending and (m is None or m.get("role") != "tool"):
            out.append({"role": "user", "content": pending})
            pending = []
        if m is None:
            break
        out.append(m)
        media = [c for c in map(_media_content, m.get("parts") or []) if c] if m.get("role") == "tool" else []
        if media:
            pending += [{"type": "text", "text": f"[media returned by tool call {m.get('tool_call_id')}]"}, *media]
    return out


def to_openai(messages: list[Message]) -> list[Message]:
    """Messages for an OpenAI-compatible request body."""
    out = []
    for m in canonical(messages):
        if "tool_calls" in m:
            m["tool_calls"] = [
                {"id": tc["id"], "type": "function", "function": {"name": tc["name"], "arguments": tc["arguments"]}}
                for tc in m["tool_calls"]
            ]
        if m["role"] == "assistant" and "content" not in m:
            m["content"] = None if "tool_calls" in m else ""
        out.append(m)
    return out


def to_template(messages: list[Message]) -> list[Message]:
    """Messages for ``tokenizer.apply_chat_template``: content always a string, arguments as objects."""
    out = []
    for m in canonical(messages):
        m.setdefault("content", "")
        if "tool_calls" in m:
            m["tool_calls"] = [
                {"id": tc["id"], "type": "function", "function": {"name": tc["name"], "arguments": _as_object(tc)}}
                for tc in m["tool_calls"]
            ]
        out.append(m)
    return out


def _as_object(call: dict[str, Any]) -> Any:
    try:
        return json.loads(call["arguments"])
    except (json.JSONDecodeError, TypeError):
        return call["arguments"]  # a malformed call re-renders as the text the model wrote


class RenderError(Exception):
    """The model's chat template cannot render a conversation (a fault of that conversation, not of the run)."""


def failed(n: int, error: str) -> list[Completion]:
    """``n`` completions that record a failed call."""
    return [Completion(text="", finish_reason="error", error=error) for _ in range(n)]


def render_prompt(
    tokenizer: Any, messages: list[Message], tools: list[ToolSchema] | None, **template_kwargs: Any
) -> str:
    """The prompt text the model's own chat template renders, ending with the generation prompt."""
    from jinja2 import TemplateError

    try:
        return tokenizer.apply_chat_template(
            to_template(messages), tools=tools or None, add_generation_prompt=True, tokenize=False, **template_kwargs
        )
    except (TemplateError, TypeError, ValueError, KeyError, AttributeError, IndexError) as e:
        raise RenderError(f"the chat template cannot render this conversation: {type(e).__name__}: {e}") from None


def decode_completion(
    tokenizer: Any,
    prompt_ids: list[int],
    token_ids: list[int],
    logprobs: list[float] | None,
    finish_reason: str,
    tools: list[ToolSchema] | None,
    ends_with_stop_token: bool = False,
    stop_string: str | None = None,
) -> Completion:
    """A completion from sampled token ids: text without the stop token or string, reasoning and tool calls split off."""
    body = token_ids[:-1] if ends_with_stop_token and token_ids else token_ids
    text = tokenizer.decode(body, skip_special_tokens=False)
    if stop_string is not None and stop_string in text:
        text = text[: text.index(stop_string)]
    reasoning, content = split_reasoning(text)
    content, calls, errors = parse_tool_calls(content, tools)
    return Completion(
        text=content,
        tool_calls=calls,
        tool_call_errors=errors,
        reasoning=reasoning,
        finish_reason="tool_calls" if calls and finish_reason == "stop" else finish_reason,
        prompt_tokens=len(prompt_ids),
        completion_tokens=len(token_ids),
        prompt_token_ids=list(prompt_ids),
        token_ids=list(token_ids),
        logprobs=None if logprobs is None else [float(x) for x in logprobs],
    )
