"""Model calls grouped into trajectories, and the ``tasks`` and ``trajectories`` rows they make.

A ``Call`` is one chat completion as an agent made it: the request it sent
(OpenAI shape: model, messages, tools, sampling fields) and the response it got
(a ``chat.completion``), or why there is none. Calls come from the recording
proxy's log and from trace files (``trajkit.curate.trace_files``,
``trajkit.curate.spans``); ``group`` puts them into threads, one trajectory
each, in the order they started:

* calls carrying one session (the agent's session header, a span's session or
  conversation id) are one thread;
* any other call continues the thread whose conversation so far its messages
  start with: the messages of that thread's last call followed by the exact
  assistant message that call returned (content and tool calls, ids included;
  arguments compared as JSON values, reasoning left out, since agents drop it);
  the longest such conversation wins. A thread whose last call failed or was
  never answered is continued by a call of the same messages (a retry). When
  two threads are continued by the same messages, the call starts a thread of
  its own and the ambiguity is counted.

A thread's messages are its first call's messages, then each call's answer as
returned (reasoning kept) and the messages the agent added before its next call
(tool results come from what the agent sent back). Its status comes from its
last call: answered without tool calls, ``completed``; cut at max tokens, or
answered with tool calls the agent never sent results for, ``truncated``; an
upstream error, ``failed``; a call the proxy never saw answered, ``aborted``
(``interrupted``). Where every call returned token ids (a vLLM upstream), they
make the row's ``token_ids``, ``loss_mask`` and ``logprobs``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from trajkit.errors import UserError
from trajkit.models.base import Completion, ToolCall
from trajkit.models.chat import stored_message
from trajkit.models.openai_backend import sampled_logprobs, token_ids_of
from trajkit.models.tokens import TokenTrace
from trajkit.schema import content_id

CallStatus = Literal["ok", "failed", "unfinished", "unanswered"]
ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass
class Call:
    """One model call: ``request`` as sent, ``response`` as received (None unless ``status`` is ok).
    ``unfinished``: the proxy never saw the answer; ``unanswered``: a trace file's conversation ends
    with messages no model answered. ``scope``: calls are grouped by conversation only within one scope
    (a trace file's record or trace)."""

    id: str
    request: dict[str, Any]
    response: dict[str, Any] | None = None
    status: CallStatus = "ok"
    error: str | None = None
    session: str | None = None
    scope: str | None = None
    started: float | None = None
    ended: float | None = None
    latency_s: float | None = None
    completions: list[Completion] = field(default_factory=list)  # the response's choices, parsed

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.request.get("messages") or []

    def answer(self, choice: int = 0) -> dict[str, Any] | None:
        """The assistant message of a choice, as returned."""
        choices = (self.response or {}).get("choices") or []
        return choices[choice].get("message") if choice < len(choices) else None


def completions(response: dict[str, Any]) -> list[Completion]:
    """A response's choices as completions holding each message exactly as returned (content, tool call
    ids and argument text, reasoning), its token ids and logprobs: what the call cache keeps for a replay, so
    the agent gets back the very message it got. A response not of the API's shape raises ValueError or TypeError."""
    choices = response.get("choices")
    usage = response.get("usage") or {}
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices) or not isinstance(usage, dict):
        raise ValueError("'choices' is not a list of objects or 'usage' not an object")
    prompt_ids = token_ids_of(response.get("prompt_token_ids"), "prompt_token_ids")
    out = []
    for choice in sorted(choices, key=lambda c: c.get("index") or 0):
        m = choice.get("message")
        if not isinstance(m, dict) or not isinstance(m.get("content"), (str, type(None))):
            raise TypeError("a choice's message is not an object with text content")
        calls = []
        for c in m.get("tool_calls") or []:
            fn = c.get("function") if isinstance(c, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise TypeError("a tool call without a function name")
            args = fn.get("arguments")
            calls.append(ToolCall(c.get("id") or "", fn["name"], args if isinstance(args, str) else json.dumps(args)))
        logprobs = sampled_logprobs(choice.get("logprobs"), int(choice.get("index") or 0))
        token_ids = token_ids_of(choice.get("token_ids"), "token_ids")
        out.append(
            Completion(
                text=m.get("content") or "",
                tool_calls=calls,
                reasoning=m.get("reasoning_content") or m.get("reasoning"),
                finish_reason=choice.get("finish_reason") or ("tool_calls" if calls else "stop"),
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                completion_tokens=len(token_ids) if token_ids else int(usage.get("completion_tokens") or 0),
                prompt_token_ids=prompt_ids,
                token_ids=token_ids,
                logprobs=logprobs,
            )
        )
    return out


def check_conversation(messages: Any, tools: Any, where: str) -> None:
    """A conversation in the OpenAI chat format, or a UserError saying what does not map."""
    if not isinstance(messages, list) or not messages:
        raise UserError(f"{where}: 'messages' is not a non-empty list")
    if tools is not None and not (isinstance(tools, list) and all(_tool_name(t) for t in tools)):
        raise UserError(f"{where}: 'tools' is not a list of functions (name, description, parameters)")
    calls: set[Any] = set()
    for j, m in enumerate(messages, 1):
        at = f"{where} message {j}"
        if not isinstance(m, dict):
            raise UserError(f"{at}: a JSON {type(m).__name__}, not a message object")
        role = m.get("role")
        if role not in ROLES:
            legacy = " (the legacy function role: write it as a tool message)" if role == "function" else ""
            raise UserError(f"{at}: role {role!r} is not one of {', '.join(ROLES)}{legacy}")
        content = m.get("content")
        if not (content is None or isinstance(content, str) or _parts(content)):
            raise UserError(f"{at}: content is neither text nor a list of content parts")
        if m.get("function_call") is not None:
            raise UserError(f"{at}: the legacy function_call is not read; write it as tool_calls")
        for k, call in enumerate(m.get("tool_calls") or [], 1):
            if role != "assistant":
                raise UserError(f"{at}: a {role} message with tool calls")
            fn = call.get("function", call) if isinstance(call, dict) else None
            args = fn.get("arguments") if isinstance(fn, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not isinstance(args, (str, dict)):
                raise UserError(f"{at}: tool call {k} has no function name and arguments (text or object)")
            calls.add(call.get("id"))
        if role == "tool":
            if not calls:
                raise UserError(f"{at}: a tool result with no tool call before it")
            if m.get("tool_call_id") not in calls:
                raise UserError(f"{at}: tool_call_id {m.get('tool_call_id')!r} answers no tool call before it")


def _parts(content: Any) -> bool:
    return isinstance(content, list) and all(isinstance(p, dict) and isinstance(p.get("type"), str) for p in content)


def _tool_name(tool: Any) -> str | None:
    fn = tool.get("function", tool) if isinstance(tool, dict) else None
    return fn.get("name") if isinstance(fn, dict) and isinstance(fn.get("name"), str) else None


@dataclass
class Thread:
    """The calls of one trajectory. ``covered[i]``: how many of call i's messages the conversation before it
    held (0 for the first call, and for a session's call that did not continue it); ``chosen[i]``: the
    choice of call i the next call continued; ``ends``: (hash, messages covered, choice) of the
    conversations a next call may continue."""

    calls: list[Call] = field(default_factory=list)
    covered: list[int] = field(default_factory=list)
    chosen: list[int] = field(default_factory=list)
    ends: list[tuple[str, int, int]] = field(default_factory=list)
    rewritten: int | None = None  # the first call (1-based) of a session that did not continue the one before


def text(content: Any) -> str | None:
    """A message's content as text: a string, or the text parts of a list of parts joined."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict) and p.get("type") == "text")
    return json.dumps(content, ensure_ascii=False)


def json_value(value: Any) -> Any:
    """JSON text parsed (tool-call arguments, an attribute held as JSON); anything else as it is."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _key(m: dict[str, Any]) -> bytes:
    """What identifies a message for matching: role, text, tool calls (arguments as JSON values), tool result id."""
    calls = stored_message({"tool_calls": m.get("tool_calls")})["tool_calls"] or []
    key = [
        m.get("role"),
        text(m.get("content")) or None,
        [[c["id"], c["name"], json_value(c["arguments"])] for c in calls],
        m.get("tool_call_id"),
    ]
    return json.dumps(key, sort_keys=True, ensure_ascii=False, default=str).encode() + b"\0"


def _chain(messages: list[dict[str, Any]]) -> list[str]:
    """Hashes of every prefix of a conversation: ``out[k]`` covers its first ``k`` messages."""
    out, h = [""], hashlib.sha256()
    for m in messages:
        h.update(_key(m))
        out.append(h.hexdigest())
    return out


def _ends(call: Call, chain: list[str]) -> list[tuple[str, int, int]]:
    """The conversations a call leaves for a next one to continue: its messages and each answer it returned,
    or (failed, unanswered) its messages alone, for the agent's retry."""
    answers = ((call.response or {}).get("choices") or []) if call.status == "ok" else []
    if not answers:
        return [(chain[-1], len(chain) - 1, 0)]
    return [(_chain([*call.messages, c.get("message") or {}])[-1], len(chain), i) for i, c in enumerate(answers)]


def group(calls: list[Call]) -> tuple[list[Thread], int]:
    """The calls' threads in the order each started, and how many calls were ambiguous (see the module)."""
    threads: list[Thread] = []
    sessions: dict[tuple[str | None, str], Thread] = {}
    index: dict[tuple[str | None, str], list[tuple[Thread, int]]] = {}  # (scope, hash) -> (thread, choice)
    ambiguous = 0
    for call in calls:
        chain = _chain(call.messages)
        thread, covered, choice = None, 0, 0
        if call.session is not None:
            thread = sessions.get((call.scope, call.session))
            if thread is not None:
                match = [(k, c) for h, k, c in thread.ends if k < len(chain) and chain[k] == h]
                if match:
                    covered, choice = max(match)
                elif thread.rewritten is None:
                    thread.rewritten = len(thread.calls) + 1
        else:
            for k in range(len(chain) - 1, 0, -1):
                found = index.get((call.scope, chain[k]))
                if found:
                    if len({id(t) for t, _ in found}) == 1:
                        thread, covered, choice = found[0][0], k, found[0][1]
                    else:
                        ambiguous += 1
                    break
        if thread is None:
            thread = Thread()
            threads.append(thread)
            if call.session is not None:
                sessions[call.scope, call.session] = thread
        else:
            thread.chosen[-1] = choice
            if call.session is None:
                for h, _, _ in thread.ends:
                    index[call.scope, h] = [e for e in index[call.scope, h] if e[0] is not thread]
        thread.calls.append(call)
        thread.covered.append(covered)
        thread.chosen.append(0)
        thread.ends = _ends(call, chain)
        if call.session is None:
            for h, _, c in thread.ends:
                index.setdefault((call.scope, h), []).append((thread, c))
    return threads, ambiguous


def _stored(m: dict[str, Any]) -> dict[str, Any]:
    """A message as the ``trajectories`` table stores it: text content, flat tool calls, ``developer`` as
    ``system``, a ``reasoning`` field (vLLM's newer name) as ``reasoning_content``."""
    role = "system" if m.get("role") == "developer" else m.get("role")
    reasoning = m.get("reasoning_content") or m.get("reasoning")
    return stored_message({**m, "role": role, "content": text(m.get("content")), "reasoning_content": reasoning})


def question(thread: Thread) -> str | None:
    """The task a thread is an attempt at: its first user message's text."""
    return next((text(m.get("content")) for m in thread.calls[0].messages if m.get("role") == "user"), None)


def task_id(question_text: str | None) -> str:
    """The id of a trace's task: a hash of its question, so every trace of one question shares it."""
    return content_id("trace", question_text)


def offered_tools(calls: list[Call]) -> list[dict[str, Any]]:
    """The tools the calls offered (OpenAI ``tools`` entries), by name in order of first appearance, as the
    ``trajectories.tools`` column holds them."""
    out: dict[str, dict[str, Any]] = {}
    for call in calls:
        for tool in call.request.get("tools") or []:
            fn = tool.get("function") if isinstance(tool, dict) and isinstance(tool.get("function"), dict) else tool
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or fn["name"] in out:
                continue
            schema = fn.get("parameters")
            out[fn["name"]] = {
                "server": None,
                "name": fn["name"],
                "description": fn.get("description") if isinstance(fn.get("description"), str) else None,
                "input_schema": json.dumps(schema, ensure_ascii=False) if schema is not None else None,
                "annotations": None,
            }
    return list(out.values())


def _number(value: Any, kind: type) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return kind(value)


def _sampling(request: dict[str, Any]) -> dict[str, Any]:
    return {
        "temperature": _number(request.get("temperature"), float),
        "top_p": _number(request.get("top_p"), float),
        "max_tokens": _number(request.get("max_tokens", request.get("max_completion_tokens")), int),
        "seed": _number(request.get("seed"), int),
    }


def _outcome(thread: Thread) -> tuple[str, str | None, str | None]:
    """Status, reason and reason code, from the thread's last call."""
    last = thread.calls[-1]
    if last.status == "unfinished":
        return "aborted", f"interrupted: the proxy stopped before the upstream answered call {last.id}", "interrupted"
    if last.status == "failed":
        return "failed", f"model error: {last.error}"[:500], "model_error"
    if last.status == "unanswered":
        extra = len(last.messages) - thread.covered[-1]
        return "truncated", f"the trace ends with {extra} message(s) no model answered", None
    choice = ((last.response or {}).get("choices") or [{}])[thread.chosen[-1]]
    if choice.get("finish_reason") == "length":
        return "truncated", "the final answer hit max_tokens", "max_tokens"
    if (choice.get("message") or {}).get("tool_calls"):
        return "truncated", "the agent made no call after the tool calls of its last answer", "turn_limit"
    return "completed", None, None


def trajectory_row(thread: Thread, traj_id: str, source: str, backend: str | None) -> dict[str, Any]:
    """The ``trajectories`` row of a thread."""
    messages: list[dict[str, Any]] = []
    answers: list[dict[str, Any]] = []
    trace: TokenTrace | None = TokenTrace() if thread.rewritten is None else None
    for i, call in enumerate(thread.calls):
        if i == 0 or thread.covered[i] == 0:
            messages = [_stored(m) for m in call.messages]
        else:
            messages += [_stored(m) for m in call.messages[thread.covered[i] :]]
        answer = call.answer(thread.chosen[i]) if call.status == "ok" else None
        if answer is None:
            continue
        messages.append(_stored({**answer, "role": "assistant"}))
        answers.append(messages[-1])
        completion = call.completions[thread.chosen[i]] if thread.chosen[i] < len(call.completions) else None
        if trace is not None and (completion is None or completion.token_ids is None):
            trace = None
        if trace is not None:
            trace.add(completion)
    status, reason, code = _outcome(thread)
    if thread.rewritten is not None and reason is None:
        reason = f"the agent rewrote its earlier messages at call {thread.rewritten}; its messages are kept from there"
    if trace is not None and trace.mismatch and reason is None:
        reason, code = f"token trace: {trace.mismatch}"[:500], "token_trace"
    answered = [c for c in thread.calls if c.status == "ok"]
    usage = [(c.response or {}).get("usage") or {} for c in answered]
    latencies = [c.latency_s for c in thread.calls if c.latency_s is not None]
    first, last = thread.calls[0], thread.calls[-1]
    total = last.ended - first.started if last.ended is not None and first.started is not None else None
    model_s = round(sum(latencies), 6) if latencies else None
    served = next((c.response.get("model") for c in reversed(answered) if c.response.get("model")), None)
    tools_called = [c["name"] for m in answers for c in m["tool_calls"] or []]
    return {
        "traj_id": traj_id,
        "task_id": task_id(question(thread)),
        "parent_id": None,
        "rollout_index": None,
        "model": served or first.request.get("model"),
        "backend": backend,
        "sampling": _sampling(first.request),
        "tools": offered_tools(thread.calls),
        "messages": messages,
        "status": status,
        "reason": reason,
        "reason_code": code,
        "model_s": model_s,
        "tools_s": round(total - model_s, 6) if total is not None and model_s is not None else None,
        "total_s": round(total, 6) if total is not None else None,
        "prompt_tokens": sum(_number(u.get("prompt_tokens"), int) or 0 for u in usage),
        "completion_tokens": sum(_number(u.get("completion_tokens"), int) or 0 for u in usage),
        "roles": [m["role"] for m in messages],
        "tools_called": tools_called,
        "num_turns": len(answers),
        "num_tool_calls": len(tools_called),
        "final_answer": answers[-1]["content"] if status == "completed" else None,
        "token_ids": list(trace.token_ids) if trace is not None and answers else None,
        "loss_mask": list(trace.loss_mask) if trace is not None and answers else None,
        "logprobs": trace.stored_logprobs() if trace is not None and answers else None,
        "source": source,
    }
