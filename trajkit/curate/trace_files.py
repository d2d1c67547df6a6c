"""Calls from where traces are kept: the recording proxy's log and trace files a team already has.

``recorded_calls`` reads a run's call log (``trajkit.models.calllog``): each
started call with its response (a stream assembled back into one response), an
upstream error, or nothing (the proxy stopped first). ``file_calls`` reads a
trace file: OpenAI chat-format JSONL (``{"messages": [...], "tools": [...]}``
per line, tool calls included), ShareGPT (``{"conversations": [{"from",
"value"}], "tools"}``, with ``function_call`` and ``observation`` turns as
LLaMA-Factory writes them), or OpenTelemetry GenAI spans
(``trajkit.curate.spans``). A conversation of a file becomes one call per
assistant message, each in a scope of its own, so ``threads.group`` gives it
back whole. What does not map is a UserError naming the file, the record and
the problem (one line, exit 2).
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from trajkit.curate.threads import Call, check_conversation, completions
from trajkit.errors import UserError

Format = Literal["auto", "openai", "sharegpt", "otel"]
SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "function_call": "assistant",
    "observation": "tool",
    "tool": "tool",
}


# ---------------------------------------------------------------- the recording proxy's log
def recorded_calls(run: Path) -> tuple[list[Call], dict[str, Any]]:
    """The chat completion calls of a run's recording in the order they arrived, and what could not be read:
    ``unreadable_request``, how many bodies are not a chat conversation ``check_conversation`` reads, and
    ``first_unreadable``, why the first is not."""
    from trajkit.models.calllog import log_path, read_log

    path = log_path(run)
    if not path.is_file():
        raise UserError(f"{run}: no recording ({path.relative_to(run)}); record with `trajkit model serve --record`")
    records, _ = read_log(path)
    starts, ends, lost = {}, {}, set()
    for r in records:
        if r.event == "start":
            starts[r.call_id] = r
        elif r.event == "end":
            ends[r.call_id] = r
        else:
            lost.update(r.header.get("ids") or [])
    calls: list[Call] = []
    skipped: dict[str, Any] = {}
    for call_id, start in starts.items():
        try:
            request = json.loads(start.body)
        except ValueError:
            request = None
        try:
            if not isinstance(request, dict):
                raise UserError("the body is not a JSON object")
            check_conversation(request.get("messages"), request.get("tools"), f"call {call_id}")
        except UserError as e:  # an agent's request the upstream will have refused too: counted, not a row
            skipped["unreadable_request"] = skipped.get("unreadable_request", 0) + 1
            skipped.setdefault("first_unreadable", str(e))
            continue
        end = ends.get(call_id)
        call = Call(call_id, request, session=start.header.get("session"), started=start.header.get("t"))
        if end is None:
            call.status = "unfinished"
        else:
            call.ended, call.latency_s = end.header.get("t"), end.header.get("s")
            _read_answer(call, int(end.header.get("status") or 0), end.body, end.header.get("error"))
        calls.append(call)
    return calls, skipped


def _read_answer(call: Call, status: int, body: bytes, error: str | None) -> None:
    """Set a call's response (and completions) from what the upstream sent, or why it failed."""
    from trajkit.models import sse

    if error or status != 200:
        call.status, call.error = "failed", error or f"HTTP {status}: {_error_text(body)}"
        return
    try:
        stream = body.lstrip().startswith(b"data:")
        response = sse.assemble(sse.decode(body)) if stream else json.loads(body)
        if not isinstance(response, dict):
            raise TypeError(f"a JSON {type(response).__name__}, not an object")
        call.completions = completions(response)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        call.status, call.error = "failed", f"unreadable response: {e}"[:500]
        return
    call.response = response


def _error_text(body: bytes) -> str:
    try:
        err = json.loads(body).get("error")
        return str(err.get("message") if isinstance(err, dict) else err)[:300]
    except (ValueError, AttributeError):
        return body[:300].decode("utf-8", "replace")


# ---------------------------------------------------------------- trace files
def file_digest(path: Path) -> str:
    """A short hash of a file's bytes: the ids of what it holds (the same file imported twice, the same ids)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()[:16]


def load_file(path: Path) -> list[Any]:
    """A trace file's records: a JSON document (a list, an OTLP export, an object listing ``data``, ``spans``
    or ``observations``, or one record), JSON lines (gzipped or not), or Parquet."""
    from trajkit.curate.files import read_records

    if not path.is_file():
        raise UserError(f"trace file not found: {path}")
    if path.name.lower().endswith(".parquet"):
        return read_records(path)
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            raw = f.read()
    except (OSError, UnicodeDecodeError, EOFError) as e:
        raise UserError(f"{path}: cannot read ({e})") from None
    try:
        doc = json.loads(raw)
    except ValueError:
        return read_records(path)  # JSON lines (their errors name the line)
    if isinstance(doc, list):
        return doc
    if isinstance(doc, dict):
        if "resourceSpans" in doc:
            return [doc]
        for key in ("data", "spans", "observations"):
            if isinstance(doc.get(key), list):
                return doc[key]
        return [doc]
    raise UserError(f"{path}: a JSON {type(doc).__name__}, not a list of records or an object")


def detect(records: list[Any], path: Path) -> Format:
    """The format of a trace file from its first record."""
    first = next((r for r in records if isinstance(r, dict)), None)
    if first is None:
        raise UserError(f"{path}: no records")
    if "messages" in first:
        return "openai"
    if "conversations" in first:
        return "sharegpt"
    if {"resourceSpans", "attributes", "span_id", "spanId", "context", "type"} & set(first):
        return "otel"
    raise UserError(
        f"{path}: record 1 is not a trace this import reads (keys {', '.join(sorted(first)[:8])}); expected "
        "OpenAI chat JSONL (messages), ShareGPT (conversations) or OpenTelemetry spans (attributes)"
    )


def file_calls(path: Path, fmt: Format) -> tuple[list[Call], str]:
    """The calls of a trace file and the format read."""
    records = load_file(path)
    fmt = detect(records, path) if fmt == "auto" else fmt
    digest = file_digest(path)
    if fmt == "otel":
        from trajkit.curate.spans import span_calls

        return span_calls(records, path, digest), fmt
    calls: list[Call] = []
    for i, rec in enumerate(records, 1):
        where = f"{path} record {i}"
        if not isinstance(rec, dict):
            raise UserError(f"{where}: a JSON {type(rec).__name__}, not an object")
        if fmt == "openai":
            messages, tools = rec.get("messages"), rec.get("tools")
        else:
            messages, tools = sharegpt_messages(rec, where), sharegpt_tools(rec.get("tools"), where)
        check_conversation(messages, tools, where)
        calls += conversation_calls(messages, tools, scope=f"{digest}:{i}", model=rec.get("model"))
    return calls, fmt


def conversation_calls(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, scope: str, model: str | None = None
) -> list[Call]:
    """A whole conversation as the calls that made it: one per assistant message (asked with what came
    before it), and an ``unanswered`` one for messages after the last answer."""
    calls = []
    for i, m in enumerate(messages):
        if m.get("role") == "assistant":
            finish = "tool_calls" if m.get("tool_calls") else "stop"
            response = {"model": model, "choices": [{"index": 0, "message": m, "finish_reason": finish}]}
            request = {"model": model, "messages": messages[:i], "tools": tools}
            calls.append(Call(f"{scope}:{i}", request, response, scope=scope))
    if not calls or messages[-1].get("role") != "assistant":
        request = {"model": model, "messages": messages, "tools": tools}
        calls.append(Call(f"{scope}:end", request, status="unanswered", scope=scope))
    return calls


def sharegpt_tools(tools: Any, where: str) -> list[dict[str, Any]] | None:
    """ShareGPT's ``tools`` (JSON text or a list of functions) as OpenAI tools."""
    if tools in (None, "", "[]"):
        return None
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except ValueError:
            raise UserError(f"{where}: 'tools' is text but not JSON") from None
    if not isinstance(tools, list):
        raise UserError(f"{where}: 'tools' is not a list of functions")
    return [t if isinstance(t, dict) and "function" in t else {"type": "function", "function": t} for t in tools]


def sharegpt_messages(rec: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """ShareGPT turns as OpenAI messages: a ``function_call`` turn (one call, or a list) becomes an assistant
    message with tool calls (ids ``call_<turn>_<k>``), each ``observation`` the result of the next call
    waiting for one."""
    turns = rec.get("conversations")
    if not isinstance(turns, list) or not turns:
        raise UserError(f"{where}: 'conversations' is not a non-empty list")
    messages: list[dict[str, Any]] = []
    waiting: list[str] = []
    for t, turn in enumerate(turns, 1):
        at = f"{where} turn {t}"
        if not isinstance(turn, dict) or turn.get("from") not in SHAREGPT_ROLES:
            got = turn.get("from") if isinstance(turn, dict) else type(turn).__name__
            raise UserError(f"{at}: 'from' is {got!r}, not one of {', '.join(SHAREGPT_ROLES)}")
        value = turn.get("value")
        if not isinstance(value, str):
            raise UserError(f"{at}: 'value' is not text")
        kind = turn["from"]
        if kind == "function_call":
            try:
                called = json.loads(value)
            except ValueError:
                raise UserError(f"{at}: a function_call whose value is not JSON") from None
            called = called if isinstance(called, list) else [called]
            if not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in called):
                raise UserError(f"{at}: a function_call without a function name")
            ids = [f"call_{t}_{k}" for k in range(len(called))]
            tool_calls = [
                {"id": i, "type": "function", "function": {"name": c["name"], "arguments": _json(c.get("arguments"))}}
                for i, c in zip(ids, called)
            ]
            messages.append({"role": "assistant", "content": None, "tool_calls": tool_calls})
            waiting += ids
        elif SHAREGPT_ROLES[kind] == "tool":
            if not waiting:
                raise UserError(f"{at}: an observation with no function_call waiting for it")
            messages.append({"role": "tool", "tool_call_id": waiting.pop(0), "content": value})
        else:
            messages.append({"role": SHAREGPT_ROLES[kind], "content": value})
    return messages


def _json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value if value is not None else {}, ensure_ascii=False)
