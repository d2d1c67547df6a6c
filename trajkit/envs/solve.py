"""One attempt at any task: the unit shared by pass@k tagging, evaluation and training rollouts.

Tool tasks (a task with ``server_ids`` or a ``tool_outcome`` verifier) run the
agent loop; the completion is the final answer and the context carries the
end state the outcome check reads. Every other task (code, math, free text)
is one chat completion from a prompt built from the task. Faults are data
(``Attempt.error``), never exceptions.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from typing import Any

from trajkit.envs.agent import AgentLimits, RolloutFn, run_episode
from trajkit.envs.env import ToolEnv
from trajkit.errors import StageStopped
from trajkit.models.base import Backend, Message, SamplingParams

CODE_INSTRUCTION = "Write the complete function{name} in a single ```python code block."
STDIO_INSTRUCTION = (
    "Write a complete Python program that reads the input from standard input and prints the answer "
    "to standard output, in a single ```python code block."
)
MATH_INSTRUCTION = "Reason step by step, then give the final answer in \\boxed{}."
MODEL_FAULT = "malformed tool call"  # reasons that are the model's doing: a wrong answer, not an error


@dataclass
class Attempt:
    """What one attempt produced.

    ``completion``: the text a verifier judges (the final answer of a tool
    task; None when there is none). ``trajectory``: the ``trajectories`` row
    of a tool task. ``context``: what else the verifier reads (``end_state``).
    ``error``: why the attempt could not be judged (a model request or a
    server failed); a malformed tool call is the model's mistake, so it is no
    error: the attempt simply has no completion.
    """

    completion: str | None
    trajectory: dict[str, Any] | None = None
    context: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0


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
) -> Attempt:
    """One attempt at a task (``sample_index`` is the rollout index of a tool task).

    Tool tasks run ``rollout`` (default ``run_episode``) in ``env``; others make
    one chat completion of ``task_prompt(task)``.
    """
    t0 = time.monotonic()
    if is_tool_task(task):
        if env is None:
            return Attempt(None, error="a tool task needs a ToolEnv (harvested servers)")
        row = await (rollout or run_episode)(
            task, backend, env, params, limits, system_prompt=system_prompt, rollout_index=sample_index, seed=seed
        )
        error = None
        if row["status"] in ("failed", "aborted") and not (row.get("reason") or "").startswith(MODEL_FAULT):
            error = row.get("reason") or row["status"]
        answer = row["final_answer"] if row["status"] == "completed" else None
        return Attempt(answer, row, {"end_state": row.get("end_state")}, error, time.monotonic() - t0)
    messages: list[Message] = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": task_prompt(task)})
    params = dataclasses.replace(params, n=1, seed=seed if seed is not None else params.seed)
    try:
        completions = await backend.generate(messages, None, params)
    except StageStopped:
        raise
    except Exception as e:  # noqa: BLE001 - a backend bug fails this attempt, not the run
        return Attempt(None, error=f"model error: {type(e).__name__}: {e}", seconds=time.monotonic() - t0)
    c = completions[0] if completions else None
    if c is None or c.error:
        return Attempt(None, error=f"model error: {c.error if c else 'no completion'}", seconds=time.monotonic() - t0)
    return Attempt(c.text, seconds=time.monotonic() - t0)
