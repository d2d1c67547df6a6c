"""Streamed Chat Completions (server-sent events) both ways.

``stream_chunks`` turns a whole response into the ``chat.completion.chunk``
objects a streaming server sends (what the scripted and replay servers answer
a ``stream: true`` request with), ``encode`` writes them as events; ``decode``
reads the events of a recorded stream and ``assemble`` puts the chunks back
into one response, as the OpenAI SDK accumulates them: text and arguments
concatenated, tool calls by index, and vLLM's ``token_ids`` (per chunk) and
``prompt_token_ids`` (first chunk) kept.
"""

from __future__ import annotations

import json
from typing import Any

DONE = b"[DONE]"


def stream_chunks(response: dict[str, Any], include_usage: bool = False) -> list[dict[str, Any]]:
    """The chunks a streaming server sends for ``response``: per choice its role, its content, each tool
    call and its finish reason; then the usage, when asked for (``stream_options.include_usage``)."""
    base = {k: response.get(k) for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    out: list[dict[str, Any]] = []
    for choice in response.get("choices") or []:
        message, i = choice.get("message") or {}, choice.get("index", 0)
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        if message.get("reasoning_content"):
            deltas.append({"reasoning_content": message["reasoning_content"]})
        if message.get("content"):
            deltas.append({"content": message["content"]})
        for j, call in enumerate(message.get("tool_calls") or []):
            deltas.append({"tool_calls": [{"index": j, **call}]})
        for k, delta in enumerate(deltas):
            entry: dict[str, Any] = {"index": i, "delta": delta, "logprobs": None, "finish_reason": None}
            if k == len(deltas) - 1:  # the sampled tokens' ids and logprobs go with the last delta
                entry["logprobs"] = choice.get("logprobs")
                if "token_ids" in choice:  # vLLM's field, null when not asked for
                    entry["token_ids"] = choice["token_ids"]
            out.append({**base, "choices": [entry]})
        out.append(
            {
                **base,
                "choices": [{"index": i, "delta": {}, "logprobs": None, "finish_reason": choice.get("finish_reason")}],
            }
        )
    if out and "prompt_token_ids" in response:
        out[0]["prompt_token_ids"] = response["prompt_token_ids"]
    if include_usage:
        out.append({**base, "choices": [], "usage": response.get("usage")})
    return out


def encode(chunks: list[dict[str, Any]]) -> list[bytes]:
    """Each chunk as one event, then ``[DONE]``."""
    return [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks] + [b"data: " + DONE + b"\n\n"]


def decode(data: bytes) -> list[dict[str, Any]]:
    """The JSON objects of a stream's ``data:`` lines (``[DONE]`` and comments left out). A line that is not
    JSON raises ValueError."""
    out = []
    for line in data.decode("utf-8", "replace").splitlines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload and payload != DONE.decode():
            value = json.loads(payload)
            if not isinstance(value, dict):
                raise ValueError(f"an event is a JSON {type(value).__name__}, not an object")
            out.append(value)
    return out


def assemble(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """One ``chat.completion`` from a stream's chunks."""
    response: dict[str, Any] = {"object": "chat.completion", "choices": []}
    choices: dict[int, dict[str, Any]] = {}
    for c in chunks:
        for key in ("id", "created", "model"):
            if c.get(key) is not None:
                response.setdefault(key, c[key])
        if c.get("usage"):
            response["usage"] = c["usage"]
        if c.get("prompt_token_ids") is not None:
            response["prompt_token_ids"] = c["prompt_token_ids"]
        for part in c.get("choices") or []:
            _add(choices.setdefault(int(part.get("index") or 0), _empty(int(part.get("index") or 0))), part)
    for i in sorted(choices):
        response["choices"].append(_finish(choices[i]))
    return response


def _empty(index: int) -> dict[str, Any]:
    return {"index": index, "content": [], "reasoning": [], "calls": {}, "finish_reason": None, "logprobs": None}


def _add(acc: dict[str, Any], part: dict[str, Any]) -> None:
    delta = part.get("delta") or {}
    if delta.get("content"):
        acc["content"].append(delta["content"])
    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    if reasoning:
        acc["reasoning"].append(reasoning)
    for call in delta.get("tool_calls") or []:
        slot = acc["calls"].setdefault(int(call.get("index") or 0), {"id": None, "name": [], "arguments": []})
        slot["id"] = slot["id"] or call.get("id")
        fn = call.get("function") or {}
        slot["name"].append(fn.get("name") or "")
        slot["arguments"].append(fn.get("arguments") or "")
    if part.get("finish_reason"):
        acc["finish_reason"] = part["finish_reason"]
    logprobs = (part.get("logprobs") or {}).get("content")
    if logprobs:
        acc["logprobs"] = (acc["logprobs"] or []) + list(logprobs)
    if part.get("token_ids") is not None:
        acc.setdefault("token_ids", []).extend(part["token_ids"])


def _finish(acc: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": "".join(acc["content"]) or None}
    if acc["reasoning"]:
        message["reasoning_content"] = "".join(acc["reasoning"])
    if acc["calls"]:
        message["tool_calls"] = [
            {
                "id": s["id"],
                "type": "function",
                "function": {"name": "".join(s["name"]), "arguments": "".join(s["arguments"])},
            }
            for _, s in sorted(acc["calls"].items())
        ]
    choice = {
        "index": acc["index"],
        "message": message,
        "finish_reason": acc["finish_reason"],
        "logprobs": {"content": acc["logprobs"]} if acc["logprobs"] is not None else None,
    }
    if "token_ids" in acc:
        choice["token_ids"] = acc["token_ids"]
    return choice
