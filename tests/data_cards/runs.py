"""A small but complete run directory for card and push tests: every table the card reads."""

from __future__ import annotations

import json
from pathlib import Path

from trajkit.schema import DIFFICULTIES, content_id
from trajkit.store import Store

SERVERS = {"weather": ["get_forecast", "get_alerts"], "files": ["read_file", "search"]}


def _messages(i: int, tool: str, text: str = "") -> list[dict]:
    call = {"id": f"c{i}", "name": tool, "arguments": json.dumps({"city": f"City {i}{text}"})}
    return [
        {"role": "user", "content": f"What is the forecast for City {i}?{text}"},
        {"role": "assistant", "content": "", "reasoning_content": text or None, "tool_calls": [call]},
        {"role": "tool", "content": f"sunny {i}{text}", "tool_call_id": f"c{i}", "name": tool},
        {"role": "assistant", "content": f"It is sunny in City {i}.{text}"},
    ]


def build_run(root: Path, n_tasks: int = 40, secret: str | None = None, text: str = "") -> Store:
    """Tasks, passk, splits, servers, trajectories (3 per task), rejected and a manifest; ``text`` is added
    to every question, message, tool call, model name, source and rejection reason."""
    store = Store(root, create=True)
    servers = [
        {
            "server_id": content_id(name),
            "name": name,
            "transport": "stdio",
            "tools": [
                {"server": name, "name": t, "description": t, "input_schema": '{"type": "object"}'} for t in tools
            ],
            "num_tools": len(tools),
            "status": "ok",
        }
        for name, tools in SERVERS.items()
    ]
    store.write("servers", "harvest", servers)
    tasks, passk, splits, trajs = [], [], [], []
    tools = [t for ts in SERVERS.values() for t in ts]
    for i in range(n_tasks):
        tid = content_id("task", i)
        question = f"Task {i}: what is the weather in City {i}?" + (f" key={secret}" if secret and i == 7 else "")
        question += text
        tasks.append(
            {
                "task_id": tid,
                "question": question,
                "mode": "single_tool",
                "source": "synth" + text,
                "vs_method": "vs_standard",
            }
        )
        correct = i % 9
        passk.append(
            {
                "task_id": tid,
                "model": "m",
                "samples": 8,
                "correct": correct,
                "pass_at_1": correct / 8,
                "pass_at": [{"k": 1, "value": correct / 8}, {"k": 4, "value": min(1.0, correct / 4)}],
                "difficulty": DIFFICULTIES[min(correct // 2, 4)],
            }
        )
        splits.append({"task_id": tid, "split": "held_out" if i % 5 == 0 else "train"})
        for r in range(3):
            tool = tools[(i + r) % len(tools)]
            msgs = _messages(i, tool, text)
            trajs.append(
                {
                    "traj_id": content_id("traj", i, r),
                    "task_id": tid,
                    "rollout_index": r,
                    "model": "m" + text,
                    "backend": "openai",
                    "messages": msgs,
                    "status": "completed" if r < 2 else "failed",
                    "reason": None if r < 2 else "tool_error",
                    "roles": [m["role"] for m in msgs],
                    "tools_called": [tool],
                    "num_turns": 2,
                    "num_tool_calls": 1,
                    "final_answer": msgs[-1]["content"],
                    "prompt_tokens": 100 + i,
                    "completion_tokens": 20 + r,
                }
            )
    store.write("tasks", "synth_tasks", tasks)
    store.write("passk", "passk", passk)
    store.write("splits", "split", splits)
    store.write("trajectories", "rollouts", trajs)
    store.write(
        "rejected",
        "filter",
        [
            {
                "reject_id": content_id("rej", t["traj_id"]),
                "row_id": t["traj_id"],
                "table_name": "trajectories",
                "stage": "filter",
                "reason": "too_short" + text,
            }
            for t in trajs[:5]
        ],
    )
    return store
