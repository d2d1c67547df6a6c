"""Write trajectories in formats other tools read: jsonl, OpenAI fine-tuning, ShareGPT."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from trajkit.store import Store

FORMATS = ("jsonl", "openai", "sharegpt")


def query(
    store: Store, all_rows: bool, where: str | None, labels: Sequence[str] = (), without: Sequence[str] = ()
) -> str:
    """The trajectories to export: the accepted ones (a label the run's ``labels.yaml`` marks ``excludes``
    takes a row out) unless ``all_rows``; then those matching ``where``, those a review gave one of
    ``labels`` (when any), and none a review gave one of ``without``."""
    from trajkit.accepted import accepted_where, excluding_labels, labelled, run_labels
    from trajkit.errors import UserError
    from trajkit.store import sql_condition

    names = {label.name for label in run_labels(store.root)}
    for name in [*labels, *without]:
        if name not in names:
            known = ", ".join(sorted(names)) or "none: the run has no labels.yaml"
            raise UserError(f"--label/--without-label: no label {name!r} in the run (labels: {known})")
    conds = [] if all_rows else [accepted_where("trajectories", excluded=excluding_labels(store))]
    conds += [sql_condition(where, "--where")] if where else []
    conds += [labelled("trajectory", "traj_id", labels)] if labels else []
    conds += [f"NOT {labelled('trajectory', 'traj_id', without)}"] if without else []
    return "SELECT * FROM trajectories" + (" WHERE " + " AND ".join(conds) if conds else "") + " ORDER BY traj_id"


def openai_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """trajkit tool rows -> the OpenAI ``tools`` list."""
    out = []
    for t in tools or []:
        out.append(
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t.get("description") or "",
                    "parameters": json.loads(t.get("input_schema") or "{}"),
                },
            }
        )
    return out


def openai_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored messages -> OpenAI chat messages (nulls dropped, tool calls nested as the API has them)."""
    out = []
    for m in messages or []:
        msg: dict[str, Any] = {"role": m["role"], "content": m.get("content") or ""}
        if m.get("reasoning_content"):
            msg["reasoning_content"] = m["reasoning_content"]
        if m.get("tool_calls"):
            msg["tool_calls"] = [
                {
                    "id": c.get("id") or f"call_{i}",
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c.get("arguments") or "{}"},
                }
                for i, c in enumerate(m["tool_calls"])
            ]
        if m.get("tool_call_id"):
            msg["tool_call_id"] = m["tool_call_id"]
        if m.get("name") and m["role"] == "tool":
            msg["name"] = m["name"]
        out.append(msg)
    return out


def sharegpt(row: dict[str, Any]) -> dict[str, Any]:
    """The ShareGPT layout with function calls, as LLaMA-Factory reads it."""
    turns = []
    for m in row.get("messages") or []:
        role = m["role"]
        if role == "system":
            turns.append({"from": "system", "value": m.get("content") or ""})
        elif role == "user":
            turns.append({"from": "human", "value": m.get("content") or ""})
        elif role == "tool":
            turns.append({"from": "observation", "value": m.get("content") or ""})
        elif m.get("tool_calls"):
            calls = [{"name": c["name"], "arguments": json.loads(c.get("arguments") or "{}")} for c in m["tool_calls"]]
            turns.append(
                {
                    "from": "function_call",
                    "value": json.dumps(calls[0] if len(calls) == 1 else calls, ensure_ascii=False),
                }
            )
        else:
            turns.append({"from": "gpt", "value": m.get("content") or ""})
    return {
        "id": row["traj_id"],
        "conversations": turns,
        "tools": json.dumps([t["function"] for t in openai_tools(row.get("tools"))], ensure_ascii=False),
    }


def convert(rows: Iterable[dict[str, Any]], fmt: str) -> Iterator[dict[str, Any]]:
    for row in rows:
        if fmt == "jsonl":
            yield row
        elif fmt == "openai":
            yield {"messages": openai_messages(row.get("messages")), "tools": openai_tools(row.get("tools"))}
        elif fmt == "sharegpt":
            yield sharegpt(row)
        else:
            raise ValueError(f"unknown format {fmt!r}")
