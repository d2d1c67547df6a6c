"""The agent loop: model <-> MCP tools, one trajectory at a time, many at once.

``run_episode`` renders the system message (``agent_system_prompt``: the
stage's prompt, then ``ANSWER_FORMAT``, the one ``Answer: ...`` line the
outcome check reads) and the task's tools, asks the model, runs the tool calls
of a turn concurrently, feeds the results back as ``tool`` messages, and stops
at a final answer (``completed``), at the turn or context limit
(``truncated``), or at a fault (``failed``). It returns a complete
``trajectories`` row. Faults are data, never exceptions:

* a model request that failed, or a tool call the model wrote that cannot be
  used (unparseable, unknown tool, arguments that violate the schema): the
  trajectory fails with the reason — malformed calls are never fed back, so
  a stored trajectory never teaches recovering from them;
* a server that would not start, crashed, hung past ``tool_timeout_s`` or
  answered garbage: the trajectory fails with the reason (the tool message
  for that call says what happened);
* an error the tool itself reports (``isError``, e.g. division by zero) is an
  ordinary result, fed back for the model to read.

Of those, ``is_transient(reason_code)`` picks the faults a retry may cure: a
model request that failed (``model_error``), a server start or call that
timed out (``timeout``) and an HTTP server that could not be connected to
(``unreachable``). Stages retry those when they run again; the others (a malformed
call, a tool that crashes on this input, a task naming an unknown server) are
faults of this input and stay. A budget cap (``StageStopped``) and a user
error (``UserError``: a missing ``${VAR}`` of a server config) stop the stage.

At the end, on the same sessions before they close, the task's outcome-check
probes (``tool_outcome`` verifier, ``spec.state``) are called and their
outputs stored in ``end_state`` (null for a probe that failed).

When the backend returns token ids, every turn goes into a
``trajkit.models.tokens.TokenTrace``: ``token_ids``, ``loss_mask`` (1 for
sampled tokens) and ``logprobs`` cover the whole trajectory. A turn whose
prompt re-renders earlier turns differently is noted in ``reason`` (when the
row has no other reason) as ``token trace: ...``.

A custom rollout function (``trajkit.plugins.RolloutFn``) replaces this loop
(``load_rollout("pkg.mod:fn")``)::

    async def rollout(task: dict, backend: Backend, env: ToolEnv, params: SamplingParams,
                      limits: AgentLimits, **kw) -> dict   # a complete trajectories row

``kw`` carries ``system_prompt``, ``history``, ``rollout_index``, ``seed``,
``policy_version`` and ``parent_id`` as ``run_episode`` takes them; a custom
function may call ``run_episode`` itself. A stage runs the one it uses through
``staged_episode``, which sets the row's ``traj_id`` to the stage's own id of the
episode, so a custom function need not know which stage called it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import time
from dataclasses import dataclass
from typing import Any

from trajkit import schema as S
from trajkit.envs.env import Episode, ToolEnv
from trajkit.envs.session import ServerFault, ToolOutput
from trajkit.envs.tools import ToolRoute, offered_tools_column
from trajkit.envs.volatile import same_result
from trajkit.errors import StageStopped, UserError
from trajkit.models.base import Backend, Completion, Message, SamplingParams
from trajkit.models.chat import stored_message as schema_message  # the stored shape, defined once in models.chat
from trajkit.plugins import RolloutFn

__all__ = [
    "ANSWER_FORMAT",
    "AgentLimits",
    "ToolEnv",
    "agent_system_prompt",
    "is_transient",
    "load_rollout",
    "outcome_probes",
    "run_episode",
    "schema_message",
]

MODEL_ERROR = "model error"  # the reason prefix of a trajectory whose model request failed
TOKEN_TRACE = "token trace"  # the reason prefix of a trajectory whose token trace does not match its turns


# What the tool-outcome check reads (trajkit.verify.matching): every episode's system message ends with it.
ANSWER_FORMAT = (
    "When you have the result, end your reply with one line of the form `Answer: <the answer>`: the answer "
    "alone (one number or value, with its unit if it has one), with no alternatives, hedges or explanation on that line."
)


def agent_system_prompt(system_prompt: str | None = None) -> str:
    """The system message of an agent episode: the stage's ``system_prompt`` (if any), then ``ANSWER_FORMAT``."""
    return f"{system_prompt.rstrip()}\n\n{ANSWER_FORMAT}" if system_prompt and system_prompt.strip() else ANSWER_FORMAT


def none_reached(reason_codes: list[str | None]) -> bool:
    """Whether every attempt of a stage failed for want of a connection to an HTTP server: the stage did no
    real work, and ends with one line (exit 2) naming the URL; where some server answered, the failures are
    rows with their reason (retried when the stage runs again)."""
    return bool(reason_codes) and all(code == "unreachable" for code in reason_codes)


def is_transient(reason_code: str | None) -> bool:
    """Whether a failure is one a retry may cure, by its reason code: a failed model request, a server start
    or call that timed out, an HTTP server not reached (``schema.TRANSIENT``); never by its text, which quotes
    servers and models."""
    return reason_code in S.TRANSIENT


@dataclass(frozen=True)
class AgentLimits:
    """When an episode stops, and how much of each tool result the model sees.

    ``max_turns``: model calls per episode. ``max_context_tokens``: stop
    (truncated) before a model call whose prompt would exceed it, estimated as
    the last call's prompt + completion tokens plus 1 token per 4 characters of
    the tool output added since. ``tool_timeout_s``: per tool call.
    ``max_tool_output_chars``: tool output beyond it is cut, with a note.
    """

    max_turns: int = 8
    max_context_tokens: int | None = None
    tool_timeout_s: float = 30.0
    max_tool_output_chars: int = 4000


def outcome_probes(task: dict[str, Any]) -> list[dict[str, Any]]:
    """The state probes of a task's ``tool_outcome`` verifier (``spec.state``), or ``[]``."""
    verifier = task.get("verifier") or {}
    if verifier.get("kind") != "tool_outcome" or not verifier.get("spec"):
        return []
    spec = verifier["spec"]
    spec = json.loads(spec) if isinstance(spec, str) else spec
    return list(spec.get("state") or [])


def load_rollout(path: str | None) -> RolloutFn:
    """``run_episode``, or the custom rollout function at a dotted path (``pkg.module:function``)."""
    if not path:
        return run_episode
    from trajkit.config import load_object

    fn = load_object(path, "rollout function")
    if not inspect.iscoroutinefunction(fn):
        raise UserError(
            f"rollout function {path!r} must be `async def rollout(task, backend, env, params, limits, **kw)`"
        )
    return fn


class _Episode:
    """The running state of one trajectory."""

    def __init__(self, task: dict[str, Any], backend: Backend, limits: AgentLimits):
        self.task, self.backend, self.limits = task, backend, limits
        self.messages: list[Message] = []
        self.status: str | None = None
        self.reason: str | None = None
        self.reason_code: str | None = None
        self.final_answer: str | None = None
        self.model_s = self.tools_s = 0.0
        self.started = time.monotonic()
        self.calls: list[dict[str, Any]] = []  # each model and tool call, for the trajectory's timeline
        self.prompt_tokens = self.completion_tokens = 0
        self.turns = 0
        self.tools_called: list[str] = []
        self.context_estimate = 0
        self.trace: Any = None
        self.end_state: list[str | None] | None = None

    def stop(self, status: str, reason: str | None, code: str | None = None) -> None:
        """End the episode; ``code`` is one of ``schema.REASON_CODES`` (null with no reason)."""
        self.status, self.reason, self.reason_code = status, reason, code

    async def ask(self, tools: list[dict], params: SamplingParams) -> Completion | None:
        """One model call; None (and the episode failed) on a request error."""
        t0 = time.monotonic()
        try:
            completions = await self.backend.generate(self.messages, tools or None, params)
        except (StageStopped, UserError):  # a budget cap or a bad config stops the stage, not just this trajectory
            raise
        except Exception as e:  # noqa: BLE001 - a backend bug is this trajectory's failure, not the run's
            completions = [Completion(text="", finish_reason="error", error=f"{type(e).__name__}: {e}")]
        finally:
            self.model_s += time.monotonic() - t0
        c = completions[0] if completions else Completion(text="", finish_reason="error", error="no completion")
        self.prompt_tokens += c.prompt_tokens
        self.completion_tokens += c.completion_tokens
        self.context_estimate = c.prompt_tokens + c.completion_tokens
        call = self._timed("model", None, t0, "error" if c.error else c.finish_reason)
        call.update(prompt_tokens=c.prompt_tokens, completion_tokens=c.completion_tokens)
        self.calls.append(call)
        if c.error:
            self.stop("failed", f"{MODEL_ERROR}: {c.error}", "model_error")
            return None
        if c.token_ids is not None or self.trace is not None:
            self._trace(c)
        self.turns += 1
        call["message"] = len(self.messages)
        self.messages.append(schema_message(c.message()))
        return c

    def _timed(self, kind: str, name: str | None, t0: float, status: str | None) -> dict[str, Any]:
        """A ``calls`` entry for a call that started at ``t0`` and ends now."""
        call = {"kind": kind, "name": name, "start_s": round(t0 - self.started, 6)}
        return call | {"seconds": round(time.monotonic() - t0, 6), "status": status}

    def _trace(self, c: Completion) -> None:
        if self.trace is None:
            from trajkit.models.tokens import TokenTrace

            self.trace = TokenTrace()
        self.trace.add(c)

    async def run_tools(self, ep: Episode, c: Completion, routes: dict[str, ToolRoute]) -> None:
        """Run a turn's tool calls concurrently; append their results in call order."""
        t0 = time.monotonic()
        outputs = await asyncio.gather(*(self._call(ep, call.name, call.arguments, routes) for call in c.tool_calls))
        self.tools_s += time.monotonic() - t0
        fault = code = None
        for call, (out, err, err_code, timed) in zip(c.tool_calls, outputs):
            self.tools_called.append(call.name)
            self.calls.append(timed | {"message": len(self.messages)})
            message = {"role": "tool", "content": out.text, "tool_call_id": call.id, "name": call.name}
            self.messages.append(schema_message(message | {"parts": list(out.parts) or None}))
            self.context_estimate += len(out.text) // 4
            if err and not fault:
                fault, code = err, err_code
        if fault:
            self.stop("failed", fault, code)

    async def _call(
        self, ep: Episode, name: str, arguments: str, routes: dict[str, ToolRoute]
    ) -> tuple[ToolOutput, str | None, str | None, dict[str, Any]]:
        """The tool's output (the message's text and media parts), on a fault the trajectory's reason and
        reason code, and the call's ``calls`` entry."""
        route = routes[name]
        t0 = time.monotonic()
        try:
            out: ToolOutput = await ep.call(
                route.server_id,
                route.tool,
                json.loads(arguments),
                self.limits.tool_timeout_s,
                self.limits.max_tool_output_chars,
            )
            result: tuple[ToolOutput, str | None, str | None] = (out, None, None)
        except ServerFault as e:
            text = f"Error: tool {name} failed: {e}"
            result = ToolOutput(text, True), f"tool {name} ({route.server}) failed: {e}", e.code
        except (StageStopped, UserError):
            raise
        except Exception as e:  # noqa: BLE001 - same: this trajectory fails, the run goes on
            why = f"tool {name} failed: {type(e).__name__}: {e}"
            result = ToolOutput(f"Error: tool {name} failed: {type(e).__name__}", True), why, "tool_error"
        return *result, self._timed("tool", name, t0, "error" if result[0].is_error else "ok")

    async def probe(self, ep: Episode) -> None:
        """Call the task's outcome-check probes on this episode's sessions; store their outputs in order."""
        probes = outcome_probes(self.task)
        if not probes:
            return
        self.end_state = []
        for i, p in enumerate(probes):
            try:
                out = await ep.call(p["server"], p["tool"], p.get("arguments") or {}, self.limits.tool_timeout_s)
                self.end_state.append(None if out.is_error else out.text)
                problem = out.text if out.is_error else None
            except (ServerFault, KeyError) as e:
                self.end_state.append(None)
                problem = f"unknown server {e}" if isinstance(e, KeyError) else str(e)
            if problem and self.status == "completed" and self.reason is None:
                self.reason = f"end-state probe {i} ({p.get('tool')}) failed: {problem}"[:500]
                self.reason_code = "probe_failed"


async def run_episode(
    task: dict[str, Any],
    backend: Backend,
    env: ToolEnv,
    params: SamplingParams,
    limits: AgentLimits,
    *,
    system_prompt: str | None = None,
    history: list[Message] | None = None,
    rollout_index: int = 0,
    seed: int | None = None,
    policy_version: int | None = None,
    parent_id: str | None = None,
) -> dict[str, Any]:
    """Run one agent episode on a task and return its ``trajectories`` row.

    ``task``: a ``tasks`` row (``task_id``, ``question``, ``server_ids``,
    ``verifier``). ``history``: earlier messages to continue (a multi-turn
    extension; ``parent_id`` names the trajectory it extends); the question is
    appended as the next user message. The system message, ``agent_system_prompt(system_prompt)``
    (the stage's prompt, then the ``Answer:`` line the outcome check reads), is prepended unless
    the history starts with a system message. ``seed`` overrides ``params.seed``.
    Its ``traj_id`` is ``traj_id(task_id, rollout_index, seed, model, parent_id)`` (no stage: a stage's row is
    stamped by ``staged_episode``).
    """
    t_start = time.monotonic()
    params = dataclasses.replace(params, n=1, seed=seed if seed is not None else params.seed)
    ep = _Episode(task, backend, limits)
    history = [schema_message(m) for m in history or []]
    if not (history and history[0]["role"] == "system"):
        ep.messages.append(schema_message({"role": "system", "content": agent_system_prompt(system_prompt)}))
    ep.messages.extend(history)
    ep.messages.append(schema_message({"role": "user", "content": task.get("question") or ""}))
    server_ids = task.get("server_ids")
    try:
        routes = env.routes(server_ids)
    except KeyError as e:
        routes = []
        ep.stop("failed", f"task names {e.args[0]}", "unknown_server")
    if ep.status is None:
        try:
            async with env.episode(server_ids) as sessions:
                await _replay(ep, sessions, routes)
                if ep.status is None:
                    await _loop(ep, sessions, routes, params)
                await ep.probe(sessions)
        except ServerFault as e:
            ep.stop("failed", str(e), e.code)
    return _row(task, backend, params, ep, routes, rollout_index, policy_version, parent_id, time.monotonic() - t_start)


async def _replay(ep: _Episode, sessions: Episode, routes: list[ToolRoute]) -> None:
    """Before an extension's turn, the world its earlier turns left: their calls to this trajectory's stateful
    stdio servers are replayed in order on its fresh instances, each result compared with the one recorded, the
    fields its server's config declares volatile aside (``envs/volatile.py``); any difference (a state the calls do
    not rebuild) fails the extension as ``state_not_reproducible``. (An HTTP
    server has no fresh instance: its state is the one it kept.)"""
    by_name = {r.name: r for r in routes}
    recorded = {m["tool_call_id"]: m["content"] or "" for m in ep.messages if m["role"] == "tool"}
    calls = [c for m in ep.messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    for c in calls:
        route = by_name.get(c["name"])
        name = route and sessions.server_name(route.server_id)
        if route is None or sessions.env.stateless[name] or sessions.rows[name]["transport"] != "stdio":
            continue  # a call that failed in its turn, or one whose server keeps no state of its own
        out, *_ = await ep._call(sessions, c["name"], c["arguments"], by_name)  # (its timeline entry: not kept)
        if not same_result(recorded.get(c["id"]), out.text, sessions.env.config_for(sessions.rows[name]).volatile):
            ep.stop(
                "failed",
                f"state not reproducible: {c['name']} replayed on a fresh {route.server} gave "
                f"{out.text[:100]!r}, not the recorded {(recorded.get(c['id']) or '')[:100]!r}",
                "state_not_reproducible",
            )
            return


async def _loop(ep: _Episode, sessions: Episode, routes: list[ToolRoute], params: SamplingParams) -> None:
    by_name = {r.name: r for r in routes}
    tools = [r.schema for r in routes]
    limits = ep.limits
    for turn in range(limits.max_turns):
        if turn and limits.max_context_tokens is not None and ep.context_estimate >= limits.max_context_tokens:
            ep.stop(
                "truncated",
                f"context limit ({ep.context_estimate} >= {limits.max_context_tokens} tokens)",
                "context_limit",
            )
            return
        c = await ep.ask(tools, params)
        if c is None:
            return
        if c.tool_call_errors:
            err = c.tool_call_errors[0]
            ep.stop("failed", f"malformed tool call: {err.reason} (raw: {err.raw[:200]})", err.code)
            return
        if not c.tool_calls:
            if c.finish_reason == "length":
                ep.stop("truncated", "the final answer hit max_tokens", "max_tokens")
            else:
                ep.final_answer = c.text
                ep.stop("completed", None)
            return
        unknown = [call.name for call in c.tool_calls if call.name not in by_name]
        bad_args = [call.name for call in c.tool_calls if not isinstance(_loads(call.arguments), dict)]
        if unknown or bad_args:
            what = f"unknown tool {unknown[0]!r}" if unknown else f"arguments of {bad_args[0]!r} are not a JSON object"
            ep.stop("failed", f"malformed tool call: {what}", "unknown_tool" if unknown else "bad_arguments")
            return
        await ep.run_tools(sessions, c, by_name)
        if ep.status is not None:
            return
    ep.stop("truncated", f"turn limit ({limits.max_turns} turns)", "turn_limit")


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return None


def episode_seed(base: int, task_id: str, index: int) -> int:
    """The sampling seed of episode (or attempt) ``index`` at a task: fixed by the base seed, the task and the
    index, the same for every model and stage, so models compared on a task draw the same random numbers."""
    return S.seed_for(base, task_id, index)


def traj_id(
    task_id: str,
    rollout_index: int,
    seed: int | None,
    model: str,
    parent_id: str | None = None,
    stage: str | None = None,
) -> str:
    """The id of a trajectory: the inputs that define the episode, never what the model said. ``stage`` is the
    name of the run's stage that ran it: two stages with the same model and seed (another temperature or system
    prompt, a rerun under another name) run two episodes, with two ids; a resumed stage gives an episode the
    same id again."""
    return S.content_id(task_id, rollout_index, seed, model, parent_id, stage)


async def staged_episode(
    rollout: RolloutFn,
    stage: str | None,
    task: dict[str, Any],
    backend: Backend,
    env: ToolEnv,
    params: SamplingParams,
    limits: AgentLimits,
    *,
    rollout_index: int,
    seed: int | None,
    parent_id: str | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """Episode ``rollout_index`` of ``task`` run by the stage named ``stage``: ``rollout`` (``run_episode`` or a
    custom ``RolloutFn``) called with the keywords every stage passes (``kw``: ``system_prompt``, ``history``,
    ``policy_version``), and its row's ``traj_id`` set to the stage's id of the episode (``traj_id`` with
    ``stage``; a None ``seed`` is ``params.seed``, as in ``run_episode``) whatever the function wrote, so no
    rollout function can give two stages' episodes one id."""
    row = await rollout(
        task, backend, env, params, limits, rollout_index=rollout_index, seed=seed, parent_id=parent_id, **kw
    )
    seed = seed if seed is not None else params.seed
    return {**row, "traj_id": traj_id(task["task_id"], rollout_index, seed, backend.model, parent_id, stage)}


def episode_head(
    task_id: str,
    rollout_index: int,
    backend: Backend,
    params: SamplingParams,
    seed: int | None,
    parent_id: str | None,
    stage: str | None = None,
) -> dict[str, Any]:
    """What defines an episode's row, whatever became of it: id, task, parent, model and sampling."""
    return {
        "traj_id": traj_id(task_id, rollout_index, seed, backend.model, parent_id, stage),
        "task_id": task_id,
        "parent_id": parent_id,
        "rollout_index": rollout_index,
        "model": backend.model,
        "backend": backend.name,
        "sampling": {
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
            "seed": seed,
        },
    }


def _row(
    task: dict[str, Any],
    backend: Backend,
    params: SamplingParams,
    ep: _Episode,
    routes: list[ToolRoute],
    rollout_index: int,
    policy_version: int | None,
    parent_id: str | None,
    total_s: float,
) -> dict[str, Any]:
    trace = ep.trace
    reason, code = ep.reason, ep.reason_code
    if trace is not None and trace.mismatch and reason is None:
        reason, code = f"{TOKEN_TRACE}: {trace.mismatch}"[:500], "token_trace"
    return {
        **episode_head(task["task_id"], rollout_index, backend, params, params.seed, parent_id),
        "tools": offered_tools_column(routes),
        "messages": ep.messages,
        "status": ep.status,
        "reason": reason,
        "reason_code": code,
        "model_s": round(ep.model_s, 6),
        "tools_s": round(ep.tools_s, 6),
        "total_s": round(total_s, 6),
        "prompt_tokens": ep.prompt_tokens,
        "completion_tokens": ep.completion_tokens,
        "roles": [m["role"] for m in ep.messages],
        "tools_called": ep.tools_called,
        "num_turns": ep.turns,
        "num_tool_calls": len(ep.tools_called),
        "final_answer": ep.final_answer,
        "end_state": ep.end_state,
        "token_ids": list(trace.token_ids) if trace is not None else None,
        "loss_mask": list(trace.loss_mask) if trace is not None else None,
        "logprobs": trace.stored_logprobs() if trace is not None else None,
        "policy_version": policy_version,
        "calls": ep.calls,
    }
