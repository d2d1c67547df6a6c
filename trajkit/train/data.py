"""Training rows from a run's curated tables, read with pyarrow; which rows are accepted is
asked of ``trajkit.accepted`` (the run's DuckDB views), the one definition export and the card use.

``task_rows`` joins ``tasks`` with its annotations (``passk``, ``splits``,
``curriculum``; for an annotation written by several stages the row of the stage
that finished last wins: ``Store.latest``, as in the store's SQL views), keeps
accepted tasks and applies a stage's data filter. ``grpo_rows`` turns tasks into
the rows of the GRPO dataset: a conversational ``prompt`` plus the columns the
rewards read. ``sft_rows`` turns accepted trajectories into SFT examples.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from trajkit import schema as S
from trajkit.accepted import accepted_ids
from trajkit.config import StageConfig
from trajkit.envs.agent import TOKEN_TRACE, agent_system_prompt
from trajkit.envs.solve import is_tool_task, task_prompt
from trajkit.errors import UserError
from trajkit.export import openai_tools
from trajkit.models.chat import to_template
from trajkit.store import Store

NO_TOOLS = "none"  # the environment of tasks that offer no tools
ALL_SERVERS = "all"  # a tool_outcome task that names no servers is offered every server, as in rollouts


class DataFilter(StageConfig):
    """Which curated tasks a training stage sees."""

    difficulty: list[Literal[S.DIFFICULTIES]] | None = Field(  # type: ignore[valid-type]
        None, description="Difficulty buckets to keep (passk.difficulty); unset keeps all, untagged included."
    )
    split: Literal[S.SPLITS] | None = Field("train", description="Split to keep (splits.split); null keeps all.")  # type: ignore[valid-type]
    stage: str | None = Field(None, description="Curriculum stage to keep (curriculum.stage).")
    modes: list[Literal[S.TASK_MODES]] | None = Field(None, description="Task modes to keep.")  # type: ignore[valid-type]
    verifier_kinds: list[str] | None = Field(None, description="Verifier kinds to keep.")
    limit: int | None = Field(None, ge=1, description="Keep at most this many tasks (in task_id order).")


def latest(store: Store, table: str) -> dict[str, dict[str, Any]]:
    """Rows of a table by key, one per key (``Store.latest``: the stage that finished last wins)."""
    key = S.table(table).key
    return {row[key]: row for row in store.latest(table).to_pylist()}


def task_rows(store: Store, data: DataFilter) -> list[dict[str, Any]]:
    """Accepted tasks with ``difficulty``, ``split``, ``stage`` and ``rollouts_per_prompt`` joined on, filtered.

    Accepted as ``trajkit.accepted`` says, but for the rule that a task with verified samples has one
    that passed: which difficulties to train on (``unsolved`` included) is the data filter's choice.
    """
    if not store.count("tasks"):
        raise UserError(f"no tasks in {store.root}: run synth or curate.import first")
    keep = accepted_ids(store, "tasks", solved=False)
    passk, splits, curriculum = latest(store, "passk"), latest(store, "splits"), latest(store, "curriculum")
    if data.split is not None and not splits:
        raise UserError(f"data filter split={data.split!r} but {store.root} has no splits table (run curate.split)")
    if data.stage is not None and not curriculum:
        raise UserError(f"data filter stage={data.stage!r} but {store.root} has no curriculum table")
    out = []
    for task in sorted(latest(store, "tasks").values(), key=lambda r: r["task_id"]):
        tid = task["task_id"]
        if tid not in keep:
            continue
        row = dict(task)
        row["difficulty"] = (passk.get(tid) or {}).get("difficulty")
        row["split"] = (splits.get(tid) or {}).get("split")
        cur = curriculum.get(tid) or {}
        row["stage"], row["rollouts_per_prompt"] = cur.get("stage"), cur.get("rollouts_per_prompt")
        if data.difficulty is not None and row["difficulty"] not in data.difficulty:
            continue
        if data.split is not None and row["split"] != data.split:
            continue
        if data.stage is not None and row["stage"] != data.stage:
            continue
        if data.modes is not None and row["mode"] not in data.modes:
            continue
        kind = (row.get("verifier") or {}).get("kind")
        if data.verifier_kinds is not None and kind not in data.verifier_kinds:
            continue
        out.append(row)
        if data.limit is not None and len(out) >= data.limit:
            break
    return out


def environment_name(task: dict[str, Any]) -> str:
    """The TRL environment a task uses: its server ids joined in order (the order tools render in)."""
    if task.get("server_ids"):
        return "+".join(task["server_ids"])
    return ALL_SERVERS if is_tool_task(task) else NO_TOOLS


def grpo_rows(tasks: list[dict[str, Any]], system_prompt: str | None = None) -> list[dict[str, Any]]:
    """GRPO dataset rows: conversational ``prompt`` plus the reward columns.

    The messages are the ones pass@k tagging and rollouts sent (``trajkit.envs.solve``): for a
    tool task the agent loop's system message (``system_prompt``, then the ``Answer:`` line the
    outcome check reads) and the question; otherwise ``system_prompt`` and the question plus its
    verifier's answer format.
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


def sft_rows(store: Store, use_tokens: bool = True) -> list[dict[str, Any]]:
    """Accepted trajectories (``trajkit.accepted``) as SFT examples, by trajectory id.

    Each has ``messages`` (shaped for the chat template as synthesis rendered
    them) and ``tools`` (OpenAI schemas), for assistant-only loss. With
    ``use_tokens``, a trajectory whose ``token_ids`` and same-length
    ``loss_mask`` were stored also has ``input_ids`` and ``assistant_masks``:
    the exact generated tokens, tool output masked — unless its trace is known
    not to match (a ``token trace: ...`` reason), which sets
    ``trace_mismatch`` (the SFT stage then trains on its messages).
    """
    keep = accepted_ids(store, "trajectories")
    columns = ["traj_id", "task_id", "reason", "messages", "tools", "token_ids", "loss_mask"]
    out = []
    for row in sorted(store.rows("trajectories", columns), key=_content_order):
        if row["traj_id"] not in keep:
            continue
        example: dict[str, Any] = {
            "traj_id": row["traj_id"],
            "messages": to_template(row["messages"] or []),
            "tools": openai_tools(row.get("tools")),
        }
        ids, mask = row.get("token_ids"), row.get("loss_mask")
        if use_tokens and ids and mask and len(ids) == len(mask) and any(mask):
            if (row.get("reason") or "").startswith(TOKEN_TRACE):
                example["trace_mismatch"] = row["reason"]
            else:
                example.update(input_ids=list(ids), assistant_masks=[int(m) for m in mask])
        if example["messages"] or "input_ids" in example:
            out.append(example)
    return out


def _content_order(row: dict[str, Any]) -> tuple[str, str]:
    """Task, then content: an order that does not depend on ids naming the model (a local model's path)."""
    return row["task_id"], S.content_id(row["messages"], row["token_ids"])


def completion_text(completion: Any) -> str:
    """The final answer of a completion: the last assistant message's content (or the text itself)."""
    if isinstance(completion, str):
        return completion
    for message in reversed(completion or []):
        if message.get("role") == "assistant":
            content = message.get("content")
            return content if isinstance(content, str) else ""
    return ""
