"""Synthetic trajectories for benchmarks: realistic shape, built column-wise with numpy.

``write_trajectories(run_dir, n)`` writes ``n`` rows of 4-12 messages each (a user
turn, tool-calling assistant turns with their tool results, a final answer) into
a run directory through the store, and returns the seconds spent writing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from trajkit import schema as S
from trajkit.store import Store

TOOLS = [
    f"{verb}_{noun}"
    for verb in ("get", "list", "create", "search", "update")
    for noun in ("weather", "stock", "file", "issue", "event", "note")
]
SERVERS = ["weather", "finance", "files", "github", "calendar", "notes"]
WORDS = [
    "the",
    "a",
    "to",
    "of",
    "and",
    "in",
    "for",
    "on",
    "with",
    "what",
    "is",
    "how",
    "many",
    "please",
    "find",
    "show",
    "me",
    "current",
    "latest",
    "report",
    "total",
]


def _strings(rng: np.random.Generator, count: int, pool_size: int = 512, words: int = 12) -> pa.Array:
    pool = pa.array([" ".join(rng.choice(WORDS, words)) for _ in range(pool_size)])
    return pool.take(pa.array(rng.integers(0, pool_size, count)))


def make_batch(n: int, seed: int, offset: int = 0) -> pa.Table:
    """``n`` trajectories as an Arrow table in the trajectories schema."""
    rng = np.random.default_rng(seed)
    calls = rng.integers(1, 6, n)  # tool calls per row -> 2 + 2*calls messages (4..12)
    n_msgs = 2 + 2 * calls
    total = int(n_msgs.sum())
    pos = np.arange(total) - np.repeat(np.cumsum(n_msgs) - n_msgs, n_msgs)
    last = pos == np.repeat(n_msgs - 1, n_msgs)
    role_idx = np.where(pos == 0, 0, np.where(last, 1, np.where(pos % 2 == 1, 1, 2)))  # user, assistant, tool
    roles = pa.array(np.array(["user", "assistant", "tool"])[role_idx])
    is_call = (role_idx == 1) & ~last
    tool_of_msg = rng.integers(0, len(TOOLS), total)
    names = pa.array(np.array(TOOLS)[tool_of_msg])
    arg_pool = pa.array(
        [
            json.dumps({"query": str(w), "limit": int(k)})
            for w, k in zip(rng.choice(WORDS, 512), rng.integers(1, 50, 512))
        ]
    )
    args = arg_pool.take(pa.array(rng.integers(0, 512, total)))
    call_struct = pa.StructArray.from_arrays(
        [pa.array(np.char.add("call_", pos.astype(str))), names, args], fields=list(S.TOOL_CALL)
    )
    # one call per calling message, none elsewhere
    call_offsets = np.concatenate([[0], np.cumsum(is_call)]).astype(np.int32)
    call_idx = np.nonzero(is_call)[0]
    tool_calls = pa.ListArray.from_arrays(
        pa.array(call_offsets), call_struct.take(pa.array(call_idx)), mask=pa.array(~is_call)
    )
    content = _strings(rng, total)
    null_str = pa.nulls(total, pa.string())
    tool_call_id = pa.array(np.where(role_idx == 2, np.char.add("call_", (pos - 1).astype(str)), None))
    msg_name = pa.array(np.where(role_idx == 2, np.array(TOOLS)[np.roll(tool_of_msg, 1)], None))  # the call it answers
    messages_struct = pa.StructArray.from_arrays(
        [roles, content, null_str, tool_calls, tool_call_id, msg_name], fields=list(S.MESSAGE)
    )
    msg_offsets = pa.array(np.concatenate([[0], np.cumsum(n_msgs)]).astype(np.int32))
    messages = pa.ListArray.from_arrays(msg_offsets, messages_struct)
    roles_list = pa.ListArray.from_arrays(msg_offsets, roles)
    tools_called = pa.ListArray.from_arrays(
        pa.array(np.concatenate([[0], np.cumsum(calls)]).astype(np.int32)), names.take(pa.array(call_idx))
    )
    ids = np.arange(offset, offset + n)
    task_ids = rng.integers(0, max(n // 8, 1), n)
    status = np.array(["completed", "truncated", "failed"])[rng.choice(3, n, p=[0.85, 0.1, 0.05])]
    final = _strings(rng, n)
    return pa.table(
        {
            "traj_id": pa.array(np.char.add("t", ids.astype(str))),
            "task_id": pa.array(np.char.add("task", task_ids.astype(str))),
            "rollout_index": pa.array(rng.integers(0, 4, n).astype(np.int32)),
            "model": pa.array(["Qwen/Qwen3-8B"] * n),
            "backend": pa.array(["vllm"] * n),
            "messages": messages,
            "status": pa.array(status),
            "model_s": pa.array(rng.gamma(2.0, 1.5, n)),
            "tools_s": pa.array(rng.gamma(1.5, 0.3, n)),
            "total_s": pa.array(rng.gamma(3.0, 1.5, n)),
            "prompt_tokens": pa.array(rng.integers(200, 4000, n)),
            "completion_tokens": pa.array(rng.integers(20, 800, n)),
            "roles": roles_list,
            "tools_called": tools_called,
            "num_turns": pa.array((calls + 1).astype(np.int32)),
            "num_tool_calls": pa.array(calls.astype(np.int32)),
            "final_answer": final,
        }
    )


def write_trajectories(run_dir: str | Path, n: int, seed: int = 0, batch: int = 100_000) -> float:
    """Write ``n`` synthetic trajectories through the store; returns seconds spent writing."""
    store = Store(run_dir, create=True)
    writer = store.writer("trajectories", "synthetic", rows_per_shard=batch)
    spent = 0.0
    for start in range(0, n, batch):
        data = make_batch(min(batch, n - start), seed + start, offset=start)
        t0 = time.perf_counter()
        writer.write(data)
        spent += time.perf_counter() - t0
    t0 = time.perf_counter()
    writer.close()
    return spent + time.perf_counter() - t0
