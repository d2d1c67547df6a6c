"""Tool calls and reasoning out of model output, never raising.

Text models (Hermes, Qwen) write tool calls as ``<tool_call>{json}</tool_call>``
blocks, several per turn; OpenAI-compatible servers return ``tool_calls``. Both
end up as ``ToolCall`` objects with the arguments as canonical JSON text. A call
that cannot be used (bad JSON, unknown tool, arguments that violate the tool's
JSON schema, a block cut off by the length limit) becomes a ``ToolCallError``
that keeps the raw text: a malformed call is data, not a crash.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from typing import Any

from trajkit.models.base import ToolCall, ToolCallError, ToolSchema
from trajkit.models.schema_check import PatternError, linear

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_CLOSE = re.compile(re.escape(CLOSE))
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def render_tool_call(name: str, arguments: dict[str, Any] | str) -> str:
    """A call in the Hermes/Qwen text format, as Qwen's chat template writes it."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return f'{OPEN}\n{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {args}}}\n{CLOSE}'


def parse_tool_calls(text: str, tools: list[ToolSchema] | None) -> tuple[str, list[ToolCall], list[ToolCallError]]:
    """Split ``<tool_call>`` blocks out of ``text``: (content without the blocks, calls, errors).

    ``tools`` (OpenAI tool schemas) enables the unknown-tool and argument
    checks; ``None`` accepts any name and arguments object. A block ends at
    the first ``</tool_call>`` after which its body is valid JSON (so argument
    strings may contain the tags), else at the first one.
    """
    calls: list[ToolCall] = []
    errors: list[ToolCallError] = []
    kept: list[str] = []
    pos = 0
    while (start := text.find(OPEN, pos)) != -1:
        kept.append(text[pos:start])
        body_start = start + len(OPEN)
        closes = [m.start() for m in _CLOSE.finditer(text, body_start)]
        if not closes:  # a block the length limit cut off
            errors.append(ToolCallError(raw=text[start:], reason="unterminated <tool_call> block"))
            pos = len(text)
            break
        end = next((c for c in closes if _is_json(text[body_start:c])), closes[0])
        pos = end + len(CLOSE)
        call, error = _parse_block(text[body_start:end], text[start:pos], len(calls) + len(errors), tools)
        if call is not None:
            calls.append(call)
        if error is not None:
            errors.append(error)
    kept.append(text[pos:])
    content = "".join(kept).strip() if (calls or errors) else text
    return content, calls, errors


def _is_json(body: str) -> bool:
    try:
        json.loads(body)
    except (json.JSONDecodeError, RecursionError):
        return False
    return True


def parse_openai_tool_calls(
    tool_calls: list[dict[str, Any]] | None, tools: list[ToolSchema] | None
) -> tuple[list[ToolCall], list[ToolCallError]]:
    """Check the ``tool_calls`` of an OpenAI chat response (nested or flat entries)."""
    calls: list[ToolCall] = []
    errors: list[ToolCallError] = []
    for i, entry in enumerate(tool_calls or []):
        raw = json.dumps(entry, ensure_ascii=False, default=str)
        if not isinstance(entry, dict):
            errors.append(ToolCallError(raw=raw, reason="tool call is not an object"))
            continue
        fn = entry.get("function") if isinstance(entry.get("function"), dict) else entry
        name, arguments = fn.get("name"), fn.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as e:
                errors.append(
                    ToolCallError(raw=raw, reason=f"arguments are not valid JSON: {e.msg}", code="bad_arguments")
                )
                continue
        call_id = entry.get("id") if isinstance(entry.get("id"), str) and entry.get("id") else None
        call, error = _check(name, arguments, raw, i, tools, call_id)
        if call is not None:
            calls.append(call)
        if error is not None:
            errors.append(error)
    return calls, errors


def split_reasoning(text: str) -> tuple[str | None, str]:
    """(reasoning, content) of a ``<think>...</think>`` answer; reasoning is None without one.

    The opening tag may sit in the prompt (thinking templates), so a lone
    ``</think>`` also ends the reasoning; an unclosed ``<think>`` (cut by the
    length limit) makes everything after it reasoning.
    """
    if THINK_CLOSE in text:
        head, content = text.split(THINK_CLOSE, 1)
        reasoning = head.split(THINK_OPEN, 1)[1] if THINK_OPEN in head else head
        return reasoning.strip("\n"), content.lstrip("\n")
    stripped = text.lstrip()
    if stripped.startswith(THINK_OPEN):
        return stripped[len(THINK_OPEN) :].strip("\n"), ""
    return None, text


def _parse_block(
    body: str, raw: str, index: int, tools: list[ToolSchema] | None
) -> tuple[ToolCall | None, ToolCallError | None]:
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        return None, ToolCallError(raw=raw, reason=f"not valid JSON: {e.msg}")
    except RecursionError:
        return None, ToolCallError(raw=raw, reason="not valid JSON: nested too deeply")
    if not isinstance(obj, dict):
        return None, ToolCallError(raw=raw, reason="tool call is not a JSON object")
    arguments = obj.get("arguments", obj.get("parameters"))
    if isinstance(arguments, str):  # some models double-encode the arguments
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as e:
            return None, ToolCallError(raw=raw, reason=f"arguments are not valid JSON: {e.msg}", code="bad_arguments")
    return _check(obj.get("name"), arguments, raw, index, tools)


def _check(
    name: Any, arguments: Any, raw: str, index: int, tools: list[ToolSchema] | None, call_id: str | None = None
) -> tuple[ToolCall | None, ToolCallError | None]:
    if not isinstance(name, str) or not name:
        return None, ToolCallError(raw=raw, reason="missing tool name")
    if arguments is None:
        return None, ToolCallError(raw=raw, reason=f"{name}: missing arguments", code="bad_arguments")
    if not isinstance(arguments, dict):
        return None, ToolCallError(raw=raw, reason=f"{name}: arguments are not a JSON object", code="bad_arguments")
    if tools is not None:
        schemas = _tool_parameters(tools)
        if name not in schemas:
            return None, ToolCallError(raw=raw, reason=f"unknown tool {name!r}", code="unknown_tool")
        problem = _violation(schemas[name], arguments)
        if problem:
            return None, ToolCallError(
                raw=raw, reason=f"{name}: arguments violate the tool schema: {problem}", code="bad_arguments"
            )
    args = json.dumps(arguments, ensure_ascii=False)
    if call_id is None:
        call_id = "call_" + hashlib.sha256(f"{index}\0{name}\0{args}".encode()).hexdigest()[:16]
    return ToolCall(id=call_id, name=name, arguments=args), None


def _tool_parameters(tools: list[ToolSchema]) -> dict[str, str | None]:
    """Tool name -> its parameters schema as JSON text (None when it has none)."""
    out: dict[str, str | None] = {}
    for tool in tools:
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            out[fn["name"]] = json.dumps(params, sort_keys=True) if isinstance(params, dict) else None
    return out


def _violation(schema_json: str | None, arguments: dict[str, Any]) -> str | None:
    """The first way ``arguments`` violate the schema, or None (also when the schema itself is unusable)."""
    if schema_json is None:
        return None
    validator = _validator(schema_json)
    if validator is None:
        return None
    try:
        error = next(iter(validator.iter_errors(arguments)), None)
    except PatternError:
        return None  # a pattern RE2 does not read: the tool's fault, not the model's (``schema_check``)
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where}: {error.message}" if where else error.message


@functools.lru_cache(maxsize=256)
def _validator(schema_json: str):
    import jsonschema

    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError:
        return None  # the tool's fault, not the model's: accept the call
    return linear(cls)(schema)  # patterns searched in linear time: a server's schema cannot hold the loop
