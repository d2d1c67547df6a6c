"""One attempt at any task, and its verdict: the unit shared by pass@k tagging, evaluation and training.

Tool tasks (a task with ``server_ids`` or a ``tool_outcome`` verifier) run the
agent loop; the completion is the final answer and the context carries the
end state the outcome check reads. Every other task (code, math, free text)
is one chat completion from a prompt built from the task. Faults are data
(``Attempt.error``, with ``transient`` set for the faults a retry may cure),
never exceptions. ``solve`` is an attempt judged by the task's verifier, as
``curate.passk`` and ``eval.passk`` both run it through one ``Solver`` (backends,
servers and sandbox opened once per stage); ``envs.agent.episode_seed`` is
the seed of sample ``index`` of a task, whichever the model. ``grpo_rows`` poses tasks to a policy in
training (and in the card's ``rl`` view) with the same messages.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Self

from trajkit.concurrency import Share
from trajkit.envs.agent import (
    MODEL_ERROR,
    AgentLimits,
    RolloutFn,
    agent_system_prompt,
    episode_seed,
    is_transient,
    run_episode,
    staged_episode,
)
from trajkit.envs.env import ToolEnv
from trajkit.envs.options import EpisodeOptions
from trajkit.errors import StageStopped, UserError
from trajkit.models.base import Backend, Message, SamplingParams

CODE_INSTRUCTION = "Write the complete function{name} in a single ```python code block."
STDIO_INSTRUCTION = (
    "Write a complete Python program that reads the input from standard input and prints the answer "
    "to standard output, in a single ```python code block."
)
MATH_INSTRUCTION = "Reason step by step, then give the final answer in \\boxed{}."
MODEL_FAULT = "malformed tool call"  # reasons that are the model's doing: a wrong answer, not an error
NO_TOOLS = "none"  # the environment of tasks that offer no tools
ALL_SERVERS = "all"  # a tool_outcome task that names no servers is offered every server, as in rollouts


@dataclass
class Attempt:
    """What one attempt produced.

    ``completion``: the text a verifier judges (the final answer of a tool
    task; None when there is none). ``trajectory``: the ``trajectories`` row
    of a tool task. ``context``: what else the verifier reads (``end_state``).
    ``error``: why the attempt could not be judged (a model request or a
    server failed, a tool crashed); a malformed tool call is the model's
    mistake, so it is no error: the attempt simply has no completion.
    ``transient``: the error is one a retry may cure (``envs.agent.is_transient``).
    ``reason_code``: the error's ``schema.REASON_CODES`` value, where known.
    """

    completion: str | None
    trajectory: dict[str, Any] | None = None
    context: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0
    transient: bool = False
    reason_code: str | None = None


def has_verifier(task: dict[str, Any]) -> bool:
    """Whether a task has a verifier an attempt is judged by here (a ``judge`` kind needs the caller's judge)."""
    return (task.get("verifier") or {}).get("kind") not in (None, "", "none", "judge")


def episode_attempt(row: dict[str, Any], seconds: float = 0.0) -> Attempt:
    """The attempt a tool task's trajectory row is: its final answer, or the error that stopped it."""
    error, reason = None, row.get("reason")
    if row["status"] in ("failed", "aborted") and not (reason or "").startswith(MODEL_FAULT):
        error = reason or row["status"]
    answer = row["final_answer"] if row["status"] == "completed" else None
    transient = error is not None and (row["status"] == "aborted" or is_transient(row.get("reason_code")))
    code = row.get("reason_code") if error is not None else None
    return Attempt(answer, row, {"end_state": row.get("end_state")}, error, seconds, transient, code)


async def trajectory_verdict(task: dict[str, Any], row: dict[str, Any], sandbox: Any = None) -> str | None:
    """The task verifier's verdict on a trajectory row (as ``solve`` judges it), or None when the task has
    no verifier judged here or the episode never ran (aborted)."""
    if not has_verifier(task) or row["status"] == "aborted":
        return None
    return (await judge(task, episode_attempt(row), sandbox)).verdict


def is_tool_task(task: dict[str, Any]) -> bool:
    return bool(task.get("server_ids")) or (task.get("verifier") or {}).get("kind") == "tool_outcome"


def task_prompt(task: dict[str, Any]) -> str:
    """The user message for a task without tools: the question plus the answer format its verifier expects."""
    meta = task.get("metadata") or {}
    meta = json.loads(meta) if isinstance(meta, str) else meta
    question = task.get("question") or meta.get("prompt") or ""
    kind = (task.get("verifier") or {}).get("kind")
    if kind == "unit_tests":
        entry = meta.get("entry_point")
        return f"{question}\n\n" + CODE_INSTRUCTION.format(name=f" `{entry}`" if entry else "")
    if kind == "stdio":
        return f"{question}\n\n{STDIO_INSTRUCTION}"
    if kind == "math":
        return f"{question}\n\n{MATH_INSTRUCTION}"
    return question


def environment_name(task: dict[str, Any]) -> str:
    """The TRL environment a task uses: its server ids joined in order (the order tools render in)."""
    if task.get("server_ids"):
        return "+".join(task["server_ids"])
    return ALL_SERVERS if is_tool_task(task) else NO_TOOLS


def grpo_rows(tasks: list[dict[str, Any]], system_prompt: str | None = None) -> list[dict[str, Any]]:
    """GRPO dataset rows: conversational ``prompt`` plus the reward columns.

    The messages are the ones pass@k tagging and rollouts send: for a tool task the agent
    loop's system message (``system_prompt``, then the ``Answer:`` line the outcome check
    reads) and the question; otherwise ``system_prompt`` and the question plus its
    verifier's answer format (``task_prompt``).
    Columns: ``task_id``, ``verifier_kind``, ``verifier_spec`` (JSON text), ``difficulty``,
    ``environment`` (the server set), ``target_tools``.
    """
    rows = []
    for t in tasks:
        verifier = t.get("verifier") or {}
        tools = is_tool_task(t)
        text = (t.get("question") or "") if tools else task_prompt(t)
        if not text:
            continue
        system = agent_system_prompt(system_prompt) if tools else system_prompt  # as the agent loop renders it
        prompt = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
        rows.append(
            {
                "prompt": prompt,
                "task_id": t["task_id"],
                "verifier_kind": verifier.get("kind") or "none",
                "verifier_spec": verifier.get("spec") or "{}",
                "difficulty": t.get("difficulty"),
                "environment": environment_name(t),
                "target_tools": list(t.get("target_tools") or []),
            }
        )
    return rows


async def attempt(
    task: dict[str, Any],
    backend: Backend,
    env: ToolEnv | None,
    params: SamplingParams,
    limits: AgentLimits,
    *,
    sample_index: int,
    seed: int | None,
    system_prompt: str | None = None,
    rollout: RolloutFn | None = None,
    stage: str | None = None,
) -> Attempt:
    """One attempt at a task (``sample_index`` is the rollout index of a tool task).

    Tool tasks run ``rollout`` (default ``run_episode``) in ``env`` as an episode of the stage named ``stage``
    (``staged_episode``: its ``traj_id`` is the stage's); others make one chat completion of ``task_prompt(task)``.
    """
    t0 = time.monotonic()
    if is_tool_task(task):
        if env is None:
            return Attempt(None, error="a tool task needs a ToolEnv (harvested servers)", reason_code="unknown_server")
        row = await staged_episode(
            rollout or run_episode,
            stage,
            task,
            backend,
            env,
            params,
            limits,
            system_prompt=system_prompt,
            rollout_index=sample_index,
            seed=seed,
        )
        return episode_attempt(row, time.monotonic() - t0)
    messages: list[Message] = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": task_prompt(task)})
    params = dataclasses.replace(params, n=1, seed=seed if seed is not None else params.seed)
    try:
        completions = await backend.generate(messages, None, params)
    except (StageStopped, UserError):
        raise
    except Exception as e:  # noqa: BLE001 - a backend bug fails this attempt, not the run
        error = f"{MODEL_ERROR}: {type(e).__name__}: {e}"
        return Attempt(None, error=error, seconds=time.monotonic() - t0, transient=True, reason_code="model_error")
    c = completions[0] if completions else None
    if c is None or c.error:
        error = f"{MODEL_ERROR}: {c.error if c else 'no completion'}"
        return Attempt(None, error=error, seconds=time.monotonic() - t0, transient=True, reason_code="model_error")
    return Attempt(c.text, seconds=time.monotonic() - t0)


def sample_row(
    sample_id: str,
    task_id: str,
    index: int,
    model: str,
    completion: str | None,
    result: Any,
    traj_id: str | None = None,
    reason_code: str | None = None,
) -> dict[str, Any]:
    """A samples row from a verifier's ``trajkit.verify.Result``; ``reason_code`` says why an attempt could not
    be judged (verdict ``error``)."""
    return {
        "sample_id": sample_id,
        "task_id": task_id,
        "sample_index": index,
        "model": model,
        "completion": completion,
        "traj_id": traj_id,
        "verdict": result.verdict,
        "score": result.score,
        "runtime_s": result.runtime_s,
        "output_tail": result.output_tail or None,
        "details": result.details_json(),
        "reason_code": reason_code if result.verdict == "error" else None,
    }


@dataclass
class Solved:
    """An attempt and its verdict. A failed attempt's result is an ``error`` verdict whose details carry
    ``reason`` and ``transient`` (whether running it again may cure it)."""

    attempt: Attempt
    result: Any  # trajkit.verify.Result


async def solve(
    task: dict[str, Any],
    backend: Backend,
    env: ToolEnv | None,
    params: SamplingParams,
    limits: AgentLimits,
    *,
    sample_index: int,
    seed: int | None,
    system_prompt: str | None = None,
    rollout: RolloutFn | None = None,
    sandbox: Any = None,
    stage: str | None = None,
) -> Solved:
    """One attempt at a task (``attempt``, its episode one of the stage named ``stage``), judged by the task's
    verifier (``judge``)."""
    a = await attempt(
        task,
        backend,
        env,
        params,
        limits,
        sample_index=sample_index,
        seed=seed,
        system_prompt=system_prompt,
        rollout=rollout,
        stage=stage,
    )
    return Solved(a, await judge(task, a, sandbox))


async def judge(task: dict[str, Any], a: Attempt, sandbox: Any = None) -> Any:
    """An attempt's ``trajkit.verify.Result``: an ``error`` verdict for a failed attempt, else the task
    verifier's (``verify``, in ``sandbox``, off the event loop)."""
    import asyncio

    from trajkit.verify import Result, verify

    if a.error is not None:
        result = Result.error(a.error, transient=a.transient)
        result.runtime_s = round(a.seconds, 4)
        return result
    return await asyncio.to_thread(verify, task["verifier"], a.completion or "", a.context, sandbox)


class Solver:
    """What attempts at a stage's tasks need, opened once: a backend per model, the run's servers as a
    ``ToolEnv`` (only when a task needs tools) and the sandbox (only when a task's verifier runs code).
    ``backend`` makes a model spec's backend (a stage's ``ctx.backend``: its usage, call cache, redactor);
    ``share`` sizes the pools. ``curate.passk`` and
    ``eval.passk`` both solve through it::

        async with Solver(models, tasks, servers, ...) as solver:
            solved = await solver.solve(task, model_name, index)
    """

    def __init__(
        self,
        models: list[Any],
        tasks: list[dict[str, Any]],
        servers: list[dict[str, Any]],
        *,
        params: SamplingParams,
        limits: AgentLimits,
        seed: int,
        backend: Callable[[Any], Backend],
        share: Share | None = None,
        servers_config: str | None = None,
        system_prompt: str | None = None,
        rollout: str | None = None,
        sandbox: str = "local",
        workers: int | None = None,
        stage: str | None = None,
    ):
        self.models, self.tasks, self.servers = models, tasks, servers
        self.stage = stage
        self.params, self.limits, self.seed = params, limits, seed
        self.make_backend, self.share, self.servers_config = backend, share, servers_config
        self.system_prompt, self.rollout_path = system_prompt, rollout
        self.sandbox_kind, self.workers = sandbox, workers
        self._stack = contextlib.AsyncExitStack()

    @classmethod
    def for_stage(
        cls,
        ctx: Any,
        cfg: EpisodeOptions,
        models: list[Any],
        tasks: list[dict[str, Any]],
        *,
        system_prompt: str | None,
        sandbox: str,
        workers: int | None,
        rollout: str | None = None,
    ) -> Solver:
        """The solver of a pass@k stage (``curate passk``, ``eval passk``): sampling, limits and servers from
        the stage's ``EpisodeOptions``, its episodes the stage's (``staged_episode``)."""
        return cls(
            models,
            tasks,
            ctx.store.rows("servers"),
            params=cfg.sampling(),
            limits=cfg.limits(),
            seed=cfg.seed,
            backend=ctx.backend,
            share=ctx.share,
            servers_config=cfg.servers_config,
            system_prompt=system_prompt,
            rollout=rollout,
            sandbox=sandbox,
            workers=workers,
            stage=ctx.name,
        )

    async def __aenter__(self) -> Self:
        from trajkit.envs.agent import load_rollout
        from trajkit.verify.backends import sandbox_for

        try:
            self.rollout = load_rollout(self.rollout_path) if self.rollout_path else None
            self.backends = {}
            for spec in self.models:
                backend = self.make_backend(spec)
                self._stack.push_async_callback(backend.aclose)
                self.backends[spec.model] = backend
            self.env = None
            if any(is_tool_task(t) for t in self.tasks):
                self.env = ToolEnv(self.servers, config=self.servers_config, share=self.share)
                self._stack.push_async_callback(self.env.aclose)
            # started only for verifiers that run code (a custom or tool verifier runs here)
            kinds = {(t.get("verifier") or {}).get("kind") for t in self.tasks}
            self.sandbox = self._stack.enter_context(sandbox_for(kinds, self.sandbox_kind, self.workers, self.share))
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    def episode_seed(self, task: dict[str, Any], index: int) -> int:
        return episode_seed(self.seed, task["task_id"], index)

    async def solve(self, task: dict[str, Any], model: str, index: int) -> Solved:
        """Attempt ``index`` of ``model`` at ``task`` (seeded by ``episode_seed``), judged; a tool task's episode
        is one of this solver's stage, with the stage's ``traj_id``: the same task, index, seed and model run by
        ``synth rollouts`` and by this stage are two trajectories, with two ids."""
        return await solve(
            task,
            self.backends[model],
            self.env,
            self.params,
            self.limits,
            sample_index=index,
            seed=self.episode_seed(task, index),
            system_prompt=self.system_prompt,
            rollout=self.rollout,
            sandbox=self.sandbox,
            stage=self.stage,
        )
