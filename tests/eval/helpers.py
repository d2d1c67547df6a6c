"""Run directories and a custom verifier for evaluation tests."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from trajkit.schema import content_id
from trajkit.store import Store

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"],
}
ADD = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}
TOOLS = [
    {
        "server": "weather",
        "name": "get_forecast",
        "description": "Forecast for a city.",
        "input_schema": json.dumps(WEATHER),
    },
    {"server": "calc", "name": "add", "description": "Add two numbers.", "input_schema": json.dumps(ADD)},
]


def exact_answer(completion: str, spec: dict, context: dict) -> bool:
    """A custom verifier (``tests.eval.helpers:exact_answer``): the completion ends with the answer."""
    return completion.strip().rstrip(".").endswith(str(spec["answer"]))


def call(i: int, name: str, **args: Any) -> dict[str, Any]:
    return {"id": f"call_{i}", "name": name, "arguments": json.dumps(args)}


def trajectory(traj_id: str, task_id: str, messages: list[dict[str, Any]], status: str = "completed") -> dict[str, Any]:
    return {
        "traj_id": traj_id,
        "task_id": task_id,
        "model": "teacher",
        "tools": TOOLS,
        "messages": messages,
        "status": status,
        "roles": [m["role"] for m in messages],
        "num_turns": sum(m["role"] == "assistant" for m in messages),
    }


def tools_run(root: Path) -> Store:
    """Held-out trajectories A (parallel calls) and B (one call), a train one and a failed one."""
    store = Store(root, create=True)
    tasks = {name: content_id("task", name) for name in ("A", "B", "C", "D")}
    store.write(
        "tasks", "synth", [{"task_id": t, "question": f"task {n}", "mode": "multi_server"} for n, t in tasks.items()]
    )
    store.write(
        "splits", "split", [{"task_id": t, "split": "train" if n == "C" else "held_out"} for n, t in tasks.items()]
    )
    a = [
        {"role": "user", "content": "Forecast for Paris for 3 days, and what is 2 + 3?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call(1, "get_forecast", city="Paris", days=3), call(2, "add", a=2, b=3)],
        },
        {"role": "tool", "content": "sunny", "tool_call_id": "call_1", "name": "get_forecast"},
        {"role": "tool", "content": "5", "tool_call_id": "call_2", "name": "add"},
        {"role": "assistant", "content": "Sunny in Paris; 2 + 3 = 5."},
    ]
    b = [
        {"role": "user", "content": "Weather in Rome?"},
        {"role": "assistant", "content": "", "tool_calls": [call(1, "get_forecast", city="Rome")]},
        {"role": "tool", "content": "rain", "tool_call_id": "call_1", "name": "get_forecast"},
        {"role": "assistant", "content": "Rain in Rome."},
    ]
    store.write(
        "trajectories",
        "rollouts",
        [
            trajectory("traj-A", tasks["A"], a),
            trajectory("traj-B", tasks["B"], b),
            trajectory("traj-C", tasks["C"], b),
            trajectory("traj-D", tasks["D"], b, status="failed"),
        ],
    )
    return store


def question_expression(messages: list[dict[str, Any]]) -> str | None:
    m = re.search(r"(\d+\s*[-+*]\s*\d+)", messages[-1].get("content") or "")
    return m.group(1) if m else None
