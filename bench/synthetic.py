"""Synthetic runs for benchmarks: realistic shape, built column-wise with numpy.

``write_trajectories(run_dir, n)`` writes ``n`` rows of 4-12 messages each (a user
turn, tool-calling assistant turns with their tool results, a final answer) into
a run directory through the store, and returns the seconds spent writing.
``write_run(run_dir, n)`` writes those and every other table a run has: servers,
tasks (one per 8 trajectories), their judge scores, pass@k, samples, splits,
curriculum, rejections, trajectory judges, and an evaluation of two models.
Ids are hashes, as in real runs (no min/max pruning by luck).
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


def traj_ids(ids: np.ndarray) -> pa.Array:
    return pa.array([S.content_id("traj", int(i)) for i in ids])


def task_ids(ids: np.ndarray) -> pa.Array:
    return pa.array([S.content_id("task", int(i)) for i in ids])


def make_batch(n: int, seed: int, offset: int = 0, n_tasks: int | None = None, traced_every: int = 0) -> pa.Table:
    """``n`` trajectories as an Arrow table in the trajectories schema; every ``traced_every``-th row
    (by index) also has a token trace of 1,000-3,000 tokens; every 20th extends the row before it."""
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
    answered = np.array(TOOLS)[np.roll(tool_of_msg, 1)]  # a tool message's name: the call it answers
    msg_name = pa.array(np.where(role_idx == 2, answered, None))
    messages_struct = pa.StructArray.from_arrays(
        [roles, content, null_str, tool_calls, tool_call_id, msg_name, pa.nulls(total, pa.list_(S.MEDIA_PART))],
        fields=list(S.MESSAGE),
    )
    msg_offsets = pa.array(np.concatenate([[0], np.cumsum(n_msgs)]).astype(np.int32))
    messages = pa.ListArray.from_arrays(msg_offsets, messages_struct)
    roles_list = pa.ListArray.from_arrays(msg_offsets, roles)
    tools_called = pa.ListArray.from_arrays(
        pa.array(np.concatenate([[0], np.cumsum(calls)]).astype(np.int32)), names.take(pa.array(call_idx))
    )
    ids = np.arange(offset, offset + n)
    task_ids_ = rng.integers(0, max(n_tasks or n // 8, 1), n)
    extends = (ids % 20 == 19) & (np.arange(n) > 0)
    task_ids_[extends] = task_ids_[np.nonzero(extends)[0] - 1]
    status_idx = rng.choice(3, n, p=[0.85, 0.1, 0.05])
    status = np.array(["completed", "truncated", "failed"])[status_idx]
    verdict = np.where(status_idx == 0, np.where(rng.random(n) < 0.7, "pass", "fail"), None)
    codes = np.array(["turn_limit", "max_tokens", "tool_error", "server_crash", "timeout", "model_error"])
    code = np.where(status_idx == 1, codes[rng.integers(0, 2, n)], codes[rng.integers(2, 6, n)])
    code = np.where(status_idx == 0, None, code)
    final = _strings(rng, n)
    traced = (ids % traced_every == 0) if traced_every else np.zeros(n, bool)
    traj = traj_ids(ids)
    return pa.table(
        {
            **_token_traces(rng, traced),
            "traj_id": traj,
            "task_id": task_ids(task_ids_),
            "parent_id": pa.array(np.where(extends, np.roll(np.array(traj.to_pylist(), dtype=object), 1), None)),
            "rollout_index": pa.array(rng.integers(0, 4, n).astype(np.int32)),
            "model": _pick(rng, ["Qwen/Qwen3-8B", "Qwen/Qwen3-32B"], n, p=[0.7, 0.3]),
            "backend": pa.array(["vllm"] * n),
            "messages": messages,
            "status": pa.array(status),
            "reason": pa.array(np.where(code == None, None, np.char.add("synthetic: ", code.astype(str)))),
            "reason_code": pa.array(code),
            "verdict": pa.array(verdict),
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
            "calls": _calls(rng, role_idx, pos, n_msgs, answered),
        }
    )


def _calls(
    rng: np.random.Generator, role_idx: np.ndarray, pos: np.ndarray, n_msgs: np.ndarray, names: np.ndarray
) -> pa.Array:
    """A ``calls`` entry per message after the first: the model call that wrote an assistant message, the tool
    call that wrote a tool message, one after the other."""
    keep = pos > 0
    kind = np.where(role_idx[keep] == 1, "model", "tool")
    seconds = np.where(kind == "model", rng.gamma(2.0, 0.8, len(kind)), rng.gamma(1.5, 0.2, len(kind)))
    per_row = n_msgs - 1
    row_start = np.repeat(np.cumsum(per_row) - per_row, per_row)
    ends = np.cumsum(seconds)
    start = ends - seconds - np.repeat(np.concatenate([[0], ends])[np.cumsum(per_row) - per_row], per_row)
    is_model = kind == "model"
    last = np.arange(len(kind)) - row_start == np.repeat(per_row - 1, per_row)
    status = np.where(
        is_model, np.where(last, "stop", "tool_calls"), np.where(rng.random(len(kind)) < 0.05, "error", "ok")
    )
    tokens = lambda lo, hi: pa.array(np.where(is_model, rng.integers(lo, hi, len(kind)), None))
    entries = pa.StructArray.from_arrays(
        [
            pa.array(kind),
            pa.array(np.where(is_model, None, names[keep])),
            pa.array(pos[keep].astype(np.int32)),
            pa.array(np.round(start, 6)),
            pa.array(np.round(seconds, 6)),
            tokens(200, 4000),
            tokens(20, 400),
            pa.array(status),
        ],
        fields=list(S.CALL),
    )
    return pa.ListArray.from_arrays(pa.array(np.concatenate([[0], np.cumsum(per_row)]).astype(np.int32)), entries)


def _token_traces(rng: np.random.Generator, traced: np.ndarray) -> dict[str, pa.Array]:
    """token_ids, loss_mask (the prompt 0, then sampled turns 1 between tool outputs 0) and logprobs."""
    lengths = np.where(traced, rng.integers(1000, 3001, len(traced)), 0)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    total = int(lengths.sum())
    pos = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    mask = ((pos >= 600) & ((pos // 150) % 2 == 0)).astype(np.int8)
    logprobs = np.where(mask == 1, -rng.gamma(0.5, 0.4, total), 0.0).astype(np.float32)
    absent = pa.array(~traced)
    return {
        "token_ids": pa.ListArray.from_arrays(
            offsets, pa.array(rng.integers(0, 151_000, total).astype(np.int32)), mask=absent
        ),
        "loss_mask": pa.ListArray.from_arrays(offsets, pa.array(mask), mask=absent),
        "logprobs": pa.ListArray.from_arrays(offsets, pa.array(logprobs), mask=absent),
    }


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


def _pick(rng: np.random.Generator, values, n: int, p=None) -> pa.Array:
    return pa.array(np.array(values)[rng.choice(len(values), n, p=p)])


def write_run(run_dir: str | Path, n: int, seed: int = 0, batch: int = 100_000) -> dict[str, int]:
    """A run with every table populated around ``n`` trajectories; returns the rows per table."""
    store = Store(run_dir, create=True)
    n_tasks = max(n // 8, 1)
    rng = np.random.default_rng(seed + 1)
    writer = store.writer("trajectories", "synthetic", rows_per_shard=batch)
    for start in range(0, n, batch):
        writer.write(make_batch(min(batch, n - start), seed + start, start, n_tasks=n_tasks, traced_every=100))
    writer.close()
    server_ids = [S.content_id("server", s) for s in SERVERS]
    store.write(
        "servers",
        "harvest",
        [{"server_id": i, "name": s, "transport": "stdio", "status": "ok"} for i, s in zip(server_ids, SERVERS)],
    )
    tids = task_ids(np.arange(n_tasks))
    k = rng.integers(1, 3, n_tasks)
    offsets = pa.array(np.concatenate([[0], np.cumsum(k)]).astype(np.int32))
    spec = pa.array(['{"answer": "42", "answer_match": "number"}'] * n_tasks)
    store.write(
        "tasks",
        "synthetic",
        pa.table(
            {
                "task_id": tids,
                "source": _pick(rng, ["synth", "humaneval", "mbpp"], n_tasks, p=[0.8, 0.1, 0.1]),
                "source_id": pa.array(np.char.add("req", rng.integers(0, n_tasks, n_tasks).astype(str))),
                "question": _strings(rng, n_tasks, pool_size=4096, words=20),
                "target_tools": pa.ListArray.from_arrays(offsets, _pick(rng, TOOLS, int(k.sum()))),
                "server_ids": pa.ListArray.from_arrays(offsets, _pick(rng, server_ids, int(k.sum()))),
                "mode": _pick(rng, ["single_tool", "multi_tool", "multi_server"], n_tasks),
                "generator_model": pa.array(["Qwen/Qwen3-32B"] * n_tasks),
                "verifier": pa.StructArray.from_arrays(
                    [pa.array(["tool_outcome"] * n_tasks), spec], fields=list(S.VERIFIER)
                ),
            }
        ),
    )
    score = lambda m: pa.array(rng.integers(1, 6, m).astype(float))
    store.write(
        "task_quality",
        "judge",
        pa.table(
            {
                "task_id": tids,
                "judge_model": pa.array(["Qwen/Qwen3-32B"] * n_tasks),
                **{d: score(n_tasks) for d in ("question_quality", "scenario_realism", "verifiability", "stability")},
                "quality_score": pa.array(np.round(rng.uniform(1, 5, n_tasks), 2)),
            }
        ),
    )
    correct = rng.binomial(8, rng.beta(1, 1, n_tasks)).astype(np.int32)
    pass1 = correct / 8
    difficulty = np.select([correct == 0, correct <= 2, correct <= 5, correct <= 7], S.DIFFICULTIES[:4], "trivial")
    pass_at = pa.ListArray.from_arrays(
        pa.array(np.arange(0, 2 * n_tasks + 1, 2, dtype=np.int32)),
        pa.StructArray.from_arrays(
            [
                pa.array(np.tile([1, 8], n_tasks).astype(np.int32)),
                pa.array(np.ravel(np.c_[pass1, correct > 0]).astype(float)),
            ],
            fields=list(S.PASS_AT),
        ),
    )
    store.write(
        "passk",
        "passk",
        pa.table(
            {
                "task_id": tids,
                "model": pa.array(["Qwen/Qwen3-8B"] * n_tasks),
                "samples": pa.array(np.full(n_tasks, 8, np.int32)),
                "correct": pa.array(correct),
                "pass_at_1": pa.array(pass1),
                "pass_at": pass_at,
                "difficulty": pa.array(difficulty),
            }
        ),
    )
    held = rng.random(n_tasks) < 0.1
    store.write("splits", "split", pa.table({"task_id": tids, "split": pa.array(np.where(held, "held_out", "train"))}))
    train = np.nonzero(~held)[0]
    store.write(
        "curriculum",
        "curriculum",
        pa.table(
            {
                "task_id": tids.take(pa.array(train)),
                "stage": pa.array(np.where(difficulty[train] == "hard", "hard", "broad")),
                "rollouts_per_prompt": pa.array(np.full(len(train), 8, np.int32)),
            }
        ),
    )
    per_task = 4
    sample_task = np.repeat(np.arange(n_tasks), per_task)
    verdict = _pick(rng, ["pass", "fail", "timeout", "error"], len(sample_task), p=[0.5, 0.4, 0.05, 0.05])
    store.write(
        "samples",
        "passk",
        pa.table(
            {
                "sample_id": pa.array([S.content_id("sample", int(i)) for i in range(len(sample_task))]),
                "task_id": tids.take(pa.array(sample_task)),
                "sample_index": pa.array(np.tile(np.arange(per_task, dtype=np.int32), n_tasks)),
                "model": pa.array(["Qwen/Qwen3-8B"] * len(sample_task)),
                "completion": _strings(rng, len(sample_task)),
                "traj_id": traj_ids(rng.integers(0, n, len(sample_task))),
                "verdict": verdict,
                "score": pa.array((np.array(verdict) == "pass").astype(float)),
            }
        ),
    )
    judged = rng.random(n) < 0.5
    store.write(
        "trajectory_quality",
        "judge",
        pa.table(
            {
                "traj_id": traj_ids(np.nonzero(judged)[0]),
                "judge_model": pa.array(["Qwen/Qwen3-32B"] * int(judged.sum())),
                "completeness": score(int(judged.sum())),
                "conciseness": score(int(judged.sum())),
                "tool_accuracy": pa.array(rng.random(int(judged.sum()))),
            }
        ),
    )
    bad_traj = np.nonzero(rng.random(n) < 0.05)[0]
    bad_task = np.nonzero(rng.random(n_tasks) < 0.05)[0]
    rows = len(bad_traj) + len(bad_task)
    store.write(
        "rejected",
        "filter",
        pa.table(
            {
                "reject_id": pa.array([S.content_id("rej", i) for i in range(rows)]),
                "row_id": pa.concat_arrays([traj_ids(bad_traj), tids.take(pa.array(bad_task))]),
                "table_name": pa.array(["trajectories"] * len(bad_traj) + ["tasks"] * len(bad_task)),
                "stage": pa.array(["filter"] * rows),
                "reason": _pick(rng, ["no_tool_call", "too_short", "odd_answer", "contaminated"], rows),
            }
        ),
    )
    evaluated = np.nonzero(held)[0]
    for model in ("Qwen/Qwen3-8B", "trained/grpo-hard"):
        got = rng.binomial(4, rng.beta(1, 1, len(evaluated))).astype(np.int32)
        store.write(
            "eval_passk",
            f"eval-{S.content_id(model)[:6]}",
            pa.table(
                {
                    "eval_id": pa.array([S.content_id("eval", model, int(i)) for i in evaluated]),
                    "model": pa.array([model] * len(evaluated)),
                    "task_id": tids.take(pa.array(evaluated)),
                    "difficulty": pa.array(difficulty[evaluated]),
                    "samples": pa.array(np.full(len(evaluated), 4, np.int32)),
                    "correct": pa.array(got),
                }
            ),
        )
    return {t: store.count(t) for t in store.tables()}
