"""OpenTelemetry GenAI spans as calls: what Langfuse, Phoenix and OTLP files hold.

Each span of a model call becomes a ``threads.Call``: its input messages the
request, its output message the response. Calls of one trace are grouped by
conversation as recorded calls are (``threads.group``); calls of different
traces never share a trajectory, and a session id (``session.id``,
``gen_ai.conversation.id``, Langfuse's ``sessionId``) groups calls as the
proxy's session header does. Other spans (tools, agents, chains) are passed
over: tool results come from the messages the next model call was sent.

Read shapes: OTLP JSON (``resourceSpans`` / ``scopeSpans`` / ``spans``,
attributes as key-value lists), what a collector's file exporter writes and
Langfuse ingests; spans whose ``attributes`` are an object (flat dotted keys or
nested), as Phoenix exports them; Langfuse observations (``type:
GENERATION`` with ``input``, ``output``, ``model``, ``usage``).

Attribute conventions:

* OpenTelemetry GenAI: ``gen_ai.input.messages`` and ``gen_ai.output.messages``
  (role and parts: ``text``, ``tool_call``, ``tool_call_response``,
  ``reasoning``), ``gen_ai.system_instructions``, ``gen_ai.tool.definitions``,
  ``gen_ai.request.model`` / ``gen_ai.response.model``,
  ``gen_ai.usage.input_tokens`` / ``output_tokens``,
  ``gen_ai.response.finish_reasons``, ``gen_ai.request.temperature`` /
  ``top_p`` / ``max_tokens`` / ``seed``; and the older indexed
  ``gen_ai.prompt.<i>.*`` / ``gen_ai.completion.<i>.*`` with
  ``llm.request.functions.<i>.*``;
* OpenInference (Phoenix): ``llm.input_messages.<i>.message.*`` and
  ``llm.output_messages.<i>.message.*`` (``role``, ``content``, ``contents``,
  ``tool_calls.<j>.tool_call.{id, function.name, function.arguments}``,
  ``tool_call_id``, ``name``), ``llm.tools.<i>.tool.json_schema``,
  ``llm.model_name``, ``llm.token_count.prompt`` / ``completion``,
  ``llm.invocation_parameters``.

A model-call span without its messages (GenAI instrumentations capture no
content unless told to), a part type that does not map (an image, a file) or
a file with no model-call span is a UserError naming the span.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from trajkit.curate.threads import Call, check_conversation, json_value
from trajkit.errors import UserError

NO_CONTENT = (
    "its instrumentation captured no message content (for OpenTelemetry GenAI set "
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true)"
)
_PARAMS = ("temperature", "top_p", "max_tokens", "seed")


def span_calls(records: list[Any], path: Path, digest: str) -> list[Call]:
    """The model calls among a file's spans, in the order they started."""
    calls: list[tuple[float, int, Call]] = []
    for n, (where, span) in enumerate(_spans(records, path)):
        call = _call(span, where, digest)
        if call is not None:
            calls.append((call.started if call.started is not None else 0.0, n, call))
    if not calls:
        raise UserError(
            f"{path}: no model-call spans (OpenTelemetry gen_ai.* or OpenInference llm.* attributes, or Langfuse "
            "GENERATION observations)"
        )
    return [c for _, _, c in sorted(calls, key=lambda x: x[:2])]


def _spans(records: list[Any], path: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every span as (where, {trace, id, start, end, attrs, error, langfuse}), OTLP unwrapped."""
    out = []
    for i, rec in enumerate(records, 1):
        where = f"{path} record {i}"
        if not isinstance(rec, dict):
            raise UserError(f"{where}: a JSON {type(rec).__name__}, not a span object")
        if "resourceSpans" in rec:
            for r, resource in enumerate(rec["resourceSpans"] or []):
                for s, scope in enumerate((resource or {}).get("scopeSpans") or []):
                    for k, span in enumerate((scope or {}).get("spans") or []):
                        at = f"{where} resourceSpans[{r}].scopeSpans[{s}].spans[{k}]"
                        out.append((at, _otlp_span(span, at)))
        else:
            out.append((where, _object_span(rec)))
    return out


def _otlp_span(span: Any, where: str) -> dict[str, Any]:
    if not isinstance(span, dict):
        raise UserError(f"{where}: not a span object")
    status = span.get("status") or {}
    failed = status.get("code") in (2, "STATUS_CODE_ERROR", "ERROR")
    return {
        "trace": span.get("traceId"),
        "id": span.get("spanId"),
        "start": _nanos(span.get("startTimeUnixNano")),
        "end": _nanos(span.get("endTimeUnixNano")),
        "attrs": flatten({a.get("key"): _any_value(a.get("value")) for a in span.get("attributes") or []}),
        "error": (status.get("message") or "the span's status is ERROR") if failed else None,
    }


def _object_span(rec: dict[str, Any]) -> dict[str, Any]:
    """A span as Phoenix exports one (``context``, ``start_time``, ``attributes``), or a Langfuse observation."""
    context = rec.get("context") if isinstance(rec.get("context"), dict) else {}
    failed = str(rec.get("status_code") or rec.get("level") or "").upper() == "ERROR"
    return {
        "trace": context.get("trace_id") or rec.get("trace_id") or rec.get("traceId"),
        "id": context.get("span_id") or rec.get("span_id") or rec.get("spanId") or rec.get("id"),
        "start": _time(rec.get("start_time") or rec.get("startTime")),
        "end": _time(rec.get("end_time") or rec.get("endTime")),
        "attrs": flatten(rec.get("attributes") or {}),
        "error": (rec.get("status_message") or rec.get("statusMessage") or "the span's status is ERROR")
        if failed
        else None,
        "langfuse": rec if rec.get("type") == "GENERATION" else None,
    }


def _any_value(value: Any) -> Any:
    """An OTLP AnyValue as a Python value."""
    if not isinstance(value, dict):
        return value
    if "arrayValue" in value:
        return [_any_value(v) for v in (value["arrayValue"] or {}).get("values") or []]
    if "kvlistValue" in value:
        return {kv.get("key"): _any_value(kv.get("value")) for kv in (value["kvlistValue"] or {}).get("values") or []}
    if "intValue" in value:
        return int(value["intValue"])
    for key in ("stringValue", "doubleValue", "boolValue", "bytesValue"):
        if key in value:
            return value[key]
    return None


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested objects and lists as flat dotted keys (``llm.input_messages.0.message.role``); flat keys stay."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list) and value and all(isinstance(v, (dict, list)) for v in value):
        out = {}
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}.{i}"))
        return out
    return {prefix: value}


def _json(flat: dict[str, Any], key: str) -> Any:
    """The value at ``key`` of an attribute the conventions hold as JSON text (or as structure): parsed."""
    return json_value(_unflatten(flat, key))


def _unflatten(flat: dict[str, Any], key: str) -> Any:
    """The value at ``key``: itself, or rebuilt from the flat keys under it (digit segments as list indices)."""
    if key in flat:
        return flat[key]
    under = {k[len(key) + 1 :]: v for k, v in flat.items() if k.startswith(key + ".")}
    if not under:
        return None
    heads = sorted({k.split(".", 1)[0] for k in under})
    if all(h.isdigit() for h in heads):
        return [_unflatten(under, h) for h in sorted(heads, key=int)]
    return {h: _unflatten(under, h) for h in heads}


def _nanos(value: Any) -> float | None:
    try:
        return int(value) / 1e9 if value is not None else None
    except (TypeError, ValueError):
        return None


def _time(value: Any) -> float | None:
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return dt.datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    return None


# ---------------------------------------------------------------- one span
def _call(span: dict[str, Any], where: str, digest: str) -> Call | None:
    """The call a span records, or None for a span that is no model call."""
    attrs = span["attrs"]
    if span.get("langfuse") is not None:
        read = _langfuse(span["langfuse"], where)
    elif any(k.startswith(("llm.input_messages.", "llm.output_messages.")) for k in attrs):
        read = _openinference(attrs, where)
    elif any(k.startswith(("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.prompt.")) for k in attrs):
        read = _genai(attrs, where)
    elif attrs.get("openinference.span.kind") == "LLM" or attrs.get("gen_ai.operation.name") in (
        "chat",
        "text_completion",
    ):
        raise UserError(f"{where}: a model-call span without its messages: {NO_CONTENT}")
    else:
        return None
    request, output, usage, model = read
    if not request.get("messages"):
        raise UserError(f"{where}: a model-call span without input messages: {NO_CONTENT}")
    scope = f"{digest}:{span.get('trace')}"
    session = attrs.get("session.id") or attrs.get("gen_ai.conversation.id")
    if span.get("langfuse") is not None:
        session = span["langfuse"].get("sessionId") or session
    call = Call(f"{scope}:{span.get('id')}", request, scope=scope, session=None if session is None else str(session))
    call.started, call.ended = span["start"], span["end"]
    if call.started is not None and call.ended is not None:
        call.latency_s = round(call.ended - call.started, 6)
    if output is None:
        if span["error"] is None:
            raise UserError(f"{where}: a model-call span without output messages: {NO_CONTENT}")
        call.status, call.error = "failed", str(span["error"])[:500]
        return call
    message, finish = output
    check_conversation([*request["messages"], message], request.get("tools"), where)
    choice = {
        "index": 0,
        "message": message,
        "finish_reason": finish or ("tool_calls" if message.get("tool_calls") else "stop"),
    }
    call.response = {"model": model or request.get("model"), "choices": [choice], "usage": usage}
    return call


def _usage(prompt: Any, completion: Any) -> dict[str, int]:
    out = {}
    for key, value in (("prompt_tokens", prompt), ("completion_tokens", completion)):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = int(value)
    return out


def _openai_tools(tools: Any) -> list[dict[str, Any]] | None:
    """Tool definitions of either shape (``{"type", "function": {...}}`` or a flat function) as OpenAI tools."""
    out = []
    for t in tools or []:
        if isinstance(t, str):
            try:
                t = json.loads(t)
            except ValueError:
                continue
        if isinstance(t, dict):
            fn = t.get("function") if isinstance(t.get("function"), dict) else t
            if isinstance(fn.get("name"), str):
                out.append(
                    {
                        "type": "function",
                        "function": {k: fn[k] for k in ("name", "description", "parameters") if k in fn},
                    }
                )
    return out or None


def _args(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value if value is not None else {}, ensure_ascii=False)


# ---------------------------------------------------------------- OpenInference (Phoenix)
def _oi_message(m: dict[str, Any], where: str) -> dict[str, Any]:
    """An OpenInference ``message`` object (``role``, ``content`` or ``contents``, ``tool_calls``, ...)."""
    content = m.get("content")
    if content is None and m.get("contents"):
        items = [(c or {}).get("message_content") or {} for c in m["contents"]]
        bad = next((c.get("type") for c in items if c.get("type") != "text"), None)
        if bad is not None:
            raise UserError(f"{where}: a message content item of type {bad!r} (only text maps)")
        content = "".join(c.get("text") or "" for c in items)
    out: dict[str, Any] = {"role": m.get("role"), "content": content}
    calls = []
    for c in m.get("tool_calls") or []:
        tc = (c or {}).get("tool_call") or {}
        fn = tc.get("function") or {}
        calls.append(
            {
                "id": tc.get("id"),
                "type": "function",
                "function": {"name": fn.get("name"), "arguments": _args(fn.get("arguments"))},
            }
        )
    if calls:
        out["tool_calls"] = calls
    for key in ("tool_call_id", "name"):
        if m.get(key) is not None:
            out[key] = m[key]
    return out


def _openinference(attrs: dict[str, Any], where: str) -> tuple[dict, tuple | None, dict, str | None]:
    inputs = [_oi_message((m or {}).get("message") or {}, where) for m in _unflatten(attrs, "llm.input_messages") or []]
    outputs = [
        _oi_message((m or {}).get("message") or {}, where) for m in _unflatten(attrs, "llm.output_messages") or []
    ]
    tools = []
    for t in _unflatten(attrs, "llm.tools") or []:
        tool = (t or {}).get("tool") or {}
        schema = tool.get("json_schema")
        tools.append(
            schema if schema is not None else {"name": tool.get("name"), "description": tool.get("description")}
        )
    params = _json(attrs, "llm.invocation_parameters")
    params = params if isinstance(params, dict) else {}
    model = attrs.get("llm.model_name")
    request = {
        "model": model,
        "messages": inputs,
        "tools": _openai_tools(tools),
        **{k: params[k] for k in _PARAMS if k in params},
    }
    usage = _usage(attrs.get("llm.token_count.prompt"), attrs.get("llm.token_count.completion"))
    output = ({**outputs[0], "role": "assistant"}, None) if outputs else None
    return request, output, usage, model


# ---------------------------------------------------------------- OpenTelemetry GenAI
def _genai_parts(messages: Any, where: str) -> list[dict[str, Any]]:
    """Semantic-convention messages (role + parts) as OpenAI messages; each tool result its own message."""
    out = []
    for m in messages or []:
        if not isinstance(m, dict):
            raise UserError(f"{where}: a gen_ai message that is not an object")
        texts, calls, reasoning, results = [], [], [], []
        for p in m.get("parts") or []:
            kind = (p or {}).get("type")
            if kind == "text":
                texts.append(p.get("content") or "")
            elif kind == "tool_call":
                calls.append(
                    {
                        "id": p.get("id"),
                        "type": "function",
                        "function": {"name": p.get("name"), "arguments": _args(p.get("arguments"))},
                    }
                )
            elif kind == "tool_call_response":
                response = p.get("response")
                results.append(
                    {
                        "role": "tool",
                        "tool_call_id": p.get("id"),
                        "content": response if isinstance(response, str) else json.dumps(response, ensure_ascii=False),
                    }
                )
            elif kind == "reasoning":
                reasoning.append(p.get("content") or "")
            else:
                raise UserError(
                    f"{where}: a message part of type {kind!r} (text, tool calls, tool results and reasoning map)"
                )
        if results:
            out += results
            continue
        msg: dict[str, Any] = {"role": m.get("role"), "content": "".join(texts) if texts else None}
        if calls:
            msg["tool_calls"] = calls
        if reasoning:
            msg["reasoning_content"] = "".join(reasoning)
        if m.get("finish_reason") is not None:
            msg["finish_reason"] = m["finish_reason"]
        out.append(msg)
    return out


def _indexed(attrs: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """The older indexed attributes (``gen_ai.prompt.<i>.role``, ``.content``, ``.tool_calls.<j>.name``, ...)."""
    out = []
    for m in _unflatten(attrs, prefix) or []:
        m = m or {}
        msg: dict[str, Any] = {"role": m.get("role"), "content": m.get("content")}
        calls = [
            {
                "id": c.get("id"),
                "type": "function",
                "function": {"name": c.get("name"), "arguments": _args(c.get("arguments"))},
            }
            for c in m.get("tool_calls") or []
            if isinstance(c, dict)
        ]
        if calls:
            msg["tool_calls"] = calls
        for key in ("tool_call_id", "finish_reason"):
            if m.get(key) is not None:
                msg[key] = m[key]
        out.append(msg)
    return out


def _genai(attrs: dict[str, Any], where: str) -> tuple[dict, tuple | None, dict, str | None]:
    if any(k.startswith(("gen_ai.input.messages", "gen_ai.output.messages")) for k in attrs):
        inputs = _genai_parts(_json(attrs, "gen_ai.input.messages"), where)
        outputs = _genai_parts(_json(attrs, "gen_ai.output.messages"), where)
        system = _json(attrs, "gen_ai.system_instructions")
        if system and not (inputs and inputs[0]["role"] == "system"):
            parts = system if isinstance(system, list) else [system]
            text = "".join(p.get("content") or "" if isinstance(p, dict) else str(p) for p in parts)
            inputs.insert(0, {"role": "system", "content": text})
        tools = _openai_tools(_json(attrs, "gen_ai.tool.definitions"))
    else:
        inputs, outputs = _indexed(attrs, "gen_ai.prompt"), _indexed(attrs, "gen_ai.completion")
        tools = _openai_tools(_unflatten(attrs, "llm.request.functions"))
    request = {"model": attrs.get("gen_ai.request.model"), "messages": inputs, "tools": tools}
    for k in _PARAMS:
        if attrs.get(f"gen_ai.request.{k}") is not None:
            request[k] = attrs[f"gen_ai.request.{k}"]
    usage = _usage(attrs.get("gen_ai.usage.input_tokens"), attrs.get("gen_ai.usage.output_tokens"))
    output = None
    if outputs:
        message = {k: v for k, v in outputs[0].items() if k != "finish_reason"}
        reasons = _json(attrs, "gen_ai.response.finish_reasons")
        finish = outputs[0].get("finish_reason") or (reasons[0] if isinstance(reasons, list) and reasons else None)
        output = ({**message, "role": "assistant"}, finish)
    return request, output, usage, attrs.get("gen_ai.response.model")


# ---------------------------------------------------------------- Langfuse observations
def _langfuse(obs: dict[str, Any], where: str) -> tuple[dict, tuple | None, dict, str | None]:
    """A GENERATION observation: ``input`` (messages, or ``{"messages", "tools"}``), ``output`` (a message, a
    list holding one, or text), ``model``, ``usage`` / ``usageDetails``, ``modelParameters``."""
    given = obs.get("input")
    tools = None
    if isinstance(given, dict):
        given, tools = given.get("messages"), given.get("tools")
    if not isinstance(given, list) or not all(isinstance(m, dict) for m in given):
        raise UserError(f"{where}: the generation's input is not a list of messages")
    out = obs.get("output")
    if isinstance(out, list):
        out = out[0] if out else None
    if isinstance(out, str):
        out = {"role": "assistant", "content": out}
    if out is not None and not isinstance(out, dict):
        raise UserError(f"{where}: the generation's output is not a message")
    usage = obs.get("usageDetails") or obs.get("usage") or {}
    params = obs.get("modelParameters") if isinstance(obs.get("modelParameters"), dict) else {}
    request = {
        "model": obs.get("model"),
        "messages": given,
        "tools": _openai_tools(tools),
        **{k: params[k] for k in _PARAMS if k in params},
    }
    usage_row = _usage(
        usage.get("input", usage.get("promptTokens")), usage.get("output", usage.get("completionTokens"))
    )
    output = ({**out, "role": "assistant"}, None) if out is not None else None
    return request, output, usage_row, obs.get("model")
