"""Test helpers for trajkit.train: a custom verifier that records its calls, runs with curated tables."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from trajkit.store import Store

CALLS: list[tuple[str, bool]] = []
_LOCK = threading.Lock()


def even_length(completion: str, spec: dict, context: dict) -> bool:
    """A custom verifier: passes when the answer has an even number of characters (a coin flip for a random model)."""
    ok = len(completion) % 2 == 0
    with _LOCK:
        CALLS.append((completion, ok))
    return ok


def raises(completion: str, spec: dict, context: dict) -> bool:
    """A custom verifier with a bug: the verdict is ``error``."""
    raise RuntimeError("verifier bug")


def length_scorer(prompts: list, completions: list, completion_ids: list | None = None, **_: Any) -> list[float]:
    """A conciseness scorer at a dotted path: 1 for an empty answer, 0.5 otherwise."""
    return [1.0 if not c else 0.5 for c in completions]


def bonus_reward(prompts: list, completions: list, bonus: float = 0.0, **_: Any) -> list[float]:
    """A custom reward with a bound setting."""
    return [bonus + len(c) for c in completions]


EVEN = {"kind": "custom", "spec": json.dumps({"path": "tests.train.helpers:even_length"})}


def even_task(i: int, **extra: Any) -> dict[str, Any]:
    question = f"Reply with an even number of characters ({i})."
    return {"task_id": f"even-{i:02d}", "question": question, "mode": "imported", "verifier": EVEN, **extra}


def write_curated(
    run: str | Path, tasks: list[dict], stage: dict[str, str], difficulty: dict[str, str] | None = None
) -> Store:
    """A run with tasks, their splits (all train), curriculum stages and difficulty buckets."""
    store = Store(run, create=True)
    store.write("tasks", "import", tasks)
    store.write("splits", "split", [{"task_id": t["task_id"], "split": "train"} for t in tasks])
    store.write(
        "curriculum", "curriculum", [{"task_id": t, "stage": s, "rollouts_per_prompt": 4} for t, s in stage.items()]
    )
    diff = difficulty or {}
    passk = [
        {"task_id": t["task_id"], "samples": 4, "correct": 2, "difficulty": diff.get(t["task_id"], "medium")}
        for t in tasks
    ]
    store.write("passk", "passk", passk)
    return store
