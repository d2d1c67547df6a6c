"""Does trajkit's tool data make an agent better? Toucan's claim at small scale, on one H200 (issue 37).

    python bench/tool_learning.py --prepare --run RUN             # here, CPU: the data (3-5 min on 2 loaded cores)
    python bench/tool_learning.py --gpu --run RUN --student DIR --phases sft       # H200: (a), (b), (d)
    python bench/tool_learning.py --gpu --run RUN --student DIR --phases sft,grpo  # next call: (c), and what is left
    python bench/tool_learning.py --report DIR [DIR ...]          # table.txt and tool_learning.png from results.json
    python bench/tool_learning.py --tiny --out DIR [--student DIR]  # everything on CPU at toy sizes (the test)

**Data** (``--prepare``, no GPU), every step a trajkit stage in ``RUN/data``:
``synth.harvest`` of the project's calculator, kv and units servers; ``synth.tasks``
(single tool, multi tool, multi server; 80 requests per mode, k = 5, verbalized
sampling) with the teacher below as the generator model, served on loopback by
``trajkit.models.scripted_server``; ``curate.dedup`` (exact duplicates dropped;
near duplicates, word Jaccard >= 0.5, only clustered: a template's tasks, the same
words with other numbers, form one cluster); ``curate.split`` (30% of the clusters
held out, so whole templates: 13 of the 38 templates, 280 held-out tasks, 146 of them
on a server/tool combination no training task uses); ``curate.decontaminate`` of the
held-out tasks (in a store of their own) against every training question, 8-word
n-grams, a hit rejected in the run (0 of 280); ``synth.rollouts`` of the teacher, 3
per train task (1,677); ``synth.judge`` (the scripted judge); ``synth.filter`` with
its default thresholds; the teacher's correct reference solution of every held-out
task (``eval tools`` replays them). The world, teacher and judge are
``bench/tool_world.py``.

**The teacher's errors**, fixed before any arm ran: each rollout gets one injected
label, drawn from a hash of its question and sampling seed (so the bench writes it to
``RUN/labels.json`` from the trajectory, and nothing the judge reads carries it):
correct 55%; wrong tool 8% (a confusable tool: subtract for add, list_units for
convert, get for set); wrong arguments 8% (a number, a unit, a key off); missing call
7% (no tool, the answer "from memory", right for about half); ignores the result 7%
(a call with a wrong argument, but what follows, and the answer, use the right
values: a right answer the tools did not give); redundant calls 7% (one call made
twice); wrong type 8% (a number sent as text, "12" for 12: it parses but breaks the
tool's schema). The judge reads only the conversation's text: fully complete when the
final answer appears in the last tool result, incomplete when it does not or the last
call failed, very incomplete without a call or an answer; it cannot see argument
types, nor whether a value saved in the middle came from the tools. What trajkit
accepted of the 1,677 rollouts of the prepared run (2026-12-05, trajkit's answer
matching: the ``Answer:`` line, ``number`` within 1e-6, ``exact`` as a value; accepted /
rejected, and what rejected them, a row counting under each that applies):

    correct          888 /   0
    ignores_result    77 /  49   (verifier 24, judge 33: a one-call task's answer contradicts its only result)
    missing_call       0 / 130   (verifier 79, judge 130, rules 130: no tool call)
    redundant_calls  123 /   1   (judge 1; the conciseness the judge rates has no default threshold)
    wrong_arguments    8 / 127   (verifier 126, judge 11, loop 2, rules 2; the 8 changed nothing the checks
                                  see: a value no probe reads, a failed call redone right, sqrt(x + 1) within 1e-6)
    wrong_tool         4 / 139   (verifier 132, judge 51, rules 15; the 4: dump for list_keys, the same keys)
    wrong_type         0 / 131   (loop 131, verifier 130, rules 131: the call breaks the tool's schema, the episode fails)

**Arms**, three seeds each (0, 1, 2), every one a trajkit stage from SmolLM2-135M-Instruct
(Q4_1 dequantized, ``trajkit model gguf``):

* (a) ``train.sft`` on every completed rollout (1,544: no judge, no filter);
* (b) ``train.sft`` on what trajkit accepts (``trajkit.accepted``: 1,100);
* (c) (b)'s model of the same seed, then ``train.grpo`` (a curriculum file of one stage)
  on the train tasks with their MCP servers in the loop (TRL's ``environment_factory``),
  rewards the task's verifier (``correctness``) and schema-valid calls (``tool_calls``,
  weight 0.2); 20 steps of 8 prompts x 8 generations;
* (d) the raw student.

(a) and (b) train at equal optimizer steps and tokens: 120 steps of 16 rows (two
micro-batches of 8), one pass over 1,920 rows each. An arm's rows are copies of the run's rollouts in a store of its
own (``RUN/arms/<arm>-s<seed>``, new ids, no verdict, unjudged: ``train.sft`` trains on
a store's accepted rows, here all of them): (b) repeats its pool (1.75 epochs: whole
passes, then a seeded sample); (a) draws 1,920 of its pool (1.24 epochs) and then swaps
rows for rows of the same injected label until its tokens (as ``train.sft`` renders
them) are within 0.1% of (b)'s, so the label mix is the pool's. The seed draws the
rows and TRL's order. Epochs, rows, tokens and trained tokens are in the table.

**Evaluation**, of every model, each in a copy of the run (``RUN/eval/<name>``):
``eval.passk`` on the first 200 held-out tasks by id, n = 8 samples each (temperature
0.7, seed 1): pass@1 with a 95% bootstrap interval over tasks (the seed means per
task), split into tasks of an unseen combination and of a seen one;
``eval.tools`` replaying the held-out reference trajectories (742 turns): tool-call
accuracy on the turns that call, and the share of well-formed calls (a name the turn
offers, arguments valid against its schema) among every call the model wrote;
``eval.tools`` on BFCL v4's non-live AST categories, the first 100 entries each of
simple_python, multiple, parallel and parallel_multiple (400), scored by BFCL's own
``ast_checker``: before (d) and after (a, b, c). **Goals**: (b) - (a) > both seed
spreads and its paired 95% bootstrap interval over tasks above 0 (the curation pays);
(c) - (b) the same (the RL stage pays); BFCL after - before: its paired interval
reaches 0 (not lower by more than its interval).

**On the H200**: three calls, back to back (the machine keeps /tmp for ~30 s after a
call), which ``--gpu-commands`` prints with what each carries, its size and the GGUF's
sha256. What travels: the real model's GGUF (93.8 MiB: ``RELAY_PART_MIB=47
scripts/gpu_relay.sh GGUF``, two parts), the wheels the image lacks installed here into
one site-packages folder for CPython 3.12 and xz-compressed (``GPU_BUNDLE_SITE=1 make
gpu-bundle``: 23.3 MiB for 28 wheels, 36.4 MiB as wheels: trl, datasets, pydantic,
duckdb, the MCP SDK and what it imports, gguf, bfcl-eval), in two halves, and the
prepared run ``bench/out/tool-run`` (0.9 MiB):

1. carry ``.relay/a``, ``.whl/a`` (61.2 MiB with the working tree): park both in /tmp/relay;
2. carry ``.relay/b``, ``.whl/b``, ``bench/out/tool-run`` (61.6 MiB): join and check the GGUF
   (exit 3: the machine was given back, do 1 and 2 again), unpack the wheels and put them and
   the checkout on the interpreter's own path (a ``.pth`` file: MCP servers are processes of
   their own and do not inherit PYTHONPATH), ``trajkit model gguf`` it, copy the run to
   /tmp/tool-run, and ``--phases sft --budget-s 400``;
3. carry nothing: ``--phases sft,grpo --budget-s 420`` (the grpo phase, and any sft job that
   call 2 did not finish: a finished job is never run again).

Each call brings back ``results.json`` (rewritten after every job) and prints the table;
``--report`` merges the calls' results here and draws ``table.txt`` and ``tool_learning.png``
(the GPU image has no matplotlib). The bench checks that MCP servers can
run contained (``trajkit.envs.contain``); where they cannot, ``--allow-weaker-sandbox``
(this bench only) runs them as plain processes, and the output and ``results.json`` say so.
Jobs run as processes of their own, ``--parallel`` (7) at once on the one GPU: the six SFT
runs together, then the seven evaluations; the three GRPO runs, then theirs. ``--budget-s``
stops starting jobs, and stops running ones, before the call's limit.

Time per phase, estimated (not yet run on the GPU) from what the CPU run counted and
the one H200 figure for this model (an AdamW step on 16 x 512 tokens in 0.27 s,
unoptimized; decode assumed at ~15 ms a step for a batch of up to 256): call 1 ~1.5 min
(the machine's start); call 2 ~6 min: unpack and convert ~40 s, arm rows ~15 s, SFT
(120 steps of 16 x 1,066 tokens, ~0.53 s a step alone, six at once) 2-3 min, evaluation
(per model ~4,200 generations for 1,600 episodes, 742 replayed turns, 400 BFCL entries,
~50 s alone; seven at once) 1.5-2 min; call 3 ~5.5 min: GRPO (20 steps of 64 multi-turn
completions, ~6.5 s a step alone, three at once) ~3.5 min, evaluation ~1.5 min. About 13
minutes in all. A fourth call would add seeds or steps: (c) with 40 GRPO steps, or n = 16.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pydantic import Field

from bench import tool_world as world
from trajkit.config import StageConfig
from trajkit.runner import StageContext, StageSpec
from trajkit.schema import content_id

# the stage's system prompt; the agent loop, train.grpo's data and eval add trajkit's ANSWER_FORMAT after it (the
# one `Answer: ...` line the verifier reads)
SYSTEM = "You are a helpful assistant with tools. Use the tools to get every value you report."
SERVERS = ("calculator", "kv", "units")
ARMS = ("d", "a", "b", "c")
ARM_NAMES = {
    "d": "(d) raw student",
    "a": "(a) SFT, every completed rollout",
    "b": "(b) SFT, what trajkit accepts",
    "c": "(c) (b), then GRPO with tools",
}
BFCL_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple")
MAX_TURNS = 5


# ---------------------------------------------------------------- sizes
def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The run's sizes: the H200 ones, or a tiny CPU version (the test)."""
    if args.tiny:
        return {
            "servers": ("calculator",),  # a server's start is most of a small stage's cost, paid per stage
            "modes": ["single_tool", "multi_tool"],
            "requests": 2,
            "k": 2,
            "rollout_concurrency": 4,
            "held_out": 0.3,
            "split_seed": "tiny",
            "rollouts": 2,
            "sft_steps": 1,
            "sft_batch": 2,
            "sft_micro": 2,
            "sft_lr": 1e-3,
            "grpo_steps": 1,
            "grpo_prompts": 2,
            "grpo_gens": 2,
            "grpo_lr": 1e-5,
            "max_completion": 8,
            "eval_tasks": 2,
            "eval_n": 1,
            "eval_max_tokens": 8,
            "tools_limit": 1,
            "bfcl_limit": 1,
            "bfcl_max_tokens": 8,
            "eval_dtype": "auto",
            "batch": 16,
            "concurrency": 8,
            "parallel": 1,
        }
    return {
        "servers": SERVERS,
        "modes": ["single_tool", "multi_tool", "multi_server"],
        "requests": args.requests,
        "k": 5,
        "rollout_concurrency": 16,
        "held_out": 0.3,
        "split_seed": "trajkit",
        "rollouts": 3,
        "sft_steps": args.sft_steps,
        "sft_batch": 16,
        "sft_micro": 8,
        "sft_lr": 1e-4,
        "grpo_steps": args.grpo_steps,
        "grpo_prompts": 8,
        "grpo_gens": 8,
        "grpo_lr": 1e-5,
        "max_completion": 256,
        "eval_tasks": args.eval_tasks,
        "eval_n": 8,
        "eval_max_tokens": 128,
        "tools_limit": None,
        "bfcl_limit": 100,
        "bfcl_max_tokens": 192,
        "eval_dtype": "bfloat16",
        "batch": 256,
        "concurrency": 256,
        "parallel": args.parallel,
    }


# ---------------------------------------------------------------- the bench's own stages
class HeldOutConfig(StageConfig):
    source: str = Field(description="The main run, whose held-out tasks this check store gets.")


def run_heldout_copy(ctx: StageContext, cfg: HeldOutConfig) -> dict[str, Any]:
    """Copy the main run's held-out tasks (those no stage rejected) into this check store."""
    from trajkit.store import Store

    main = Store(Path(cfg.source))
    held = {r["task_id"] for r in main.rows("splits") if r["split"] == "held_out"} - main.rejected("tasks")
    held -= ctx.done("tasks")
    rows = [t for t in main.rows("tasks") if t["task_id"] in held]
    ctx.write("tasks", rows)
    return {"tasks": len(rows)}


HELDOUT_COPY = StageSpec(
    "bench.heldout_tasks",
    HeldOutConfig,
    run_heldout_copy,
    outputs=("tasks",),
    help="The main run's held-out tasks, copied into a store of their own for the contamination check.",
)


class ContaminatedConfig(StageConfig):
    check: str = Field(description="The check store, where curate.decontaminate ran on the held-out tasks.")


def run_contaminated(ctx: StageContext, cfg: ContaminatedConfig) -> dict[str, Any]:
    """Reject, in the main run, every held-out task the check found sharing an n-gram with a training task."""
    from trajkit.store import Store

    hits = [r for r in Store(Path(cfg.check)).rows("rejected") if r["reason"] == "contaminated"]
    for r in hits:
        ctx.reject("tasks", r["row_id"], "contaminated", r["detail"])
    return {"contaminated": len(hits)}


CONTAMINATED = StageSpec(
    "bench.contaminated",
    ContaminatedConfig,
    run_contaminated,
    inputs=("tasks",),
    outputs=("rejected",),
    help="Reject the held-out tasks that the contamination check found near a training task.",
)


class ArmRowsConfig(StageConfig):
    source: str = Field(description="The main run.")
    rule: Literal["completed", "accepted"] = Field(
        description="completed: every completed train rollout; accepted: trajkit's accepted ones."
    )
    rows: int = Field(ge=1, description="Rows to write: SFT steps x batch.")
    seed: int = 0
    tokenizer: str = Field(description="The student's tokenizer, to count tokens as train.sft renders them.")
    match_tokens: int | None = Field(
        None, description="Then swap rows for rows of the same label until their tokens are within 0.1% of this."
    )


def pool_rows(main: Any, rule: str) -> list[dict[str, Any]]:
    """The train rollouts an arm may draw from: completed ones, or trajkit's accepted ones."""
    from trajkit.accepted import accepted_ids

    train = {r["task_id"] for r in main.rows("splits") if r["split"] == "train"}
    rows = [
        r for r in main.rows("trajectories", stage="rollouts") if r["status"] == "completed" and r["task_id"] in train
    ]
    if rule == "accepted":
        keep = accepted_ids(main, "trajectories")
        rows = [r for r in rows if r["traj_id"] in keep]
    return sorted(rows, key=lambda r: r["traj_id"])


_COUNTS: dict[tuple[str, str], dict[str, tuple[int, int]]] = {}


def token_counts(main: Any, tokenizer: str) -> dict[str, tuple[int, int]]:
    """traj_id -> (tokens, trained tokens) of every completed train rollout, as train.sft renders it (TRL's
    training chat template); counted once per process for all arms and seeds."""
    key = (str(main.root), tokenizer)
    if key not in _COUNTS:
        _COUNTS[key] = _count(pool_rows(main, "completed"), tokenizer)
    return _COUNTS[key]


def _count(rows: list[dict[str, Any]], tokenizer: str) -> dict[str, tuple[int, int]]:
    from trajkit.export import openai_tools
    from trajkit.models.chat import to_template
    from trajkit.train.sft import render_messages
    from trajkit.train.weights import load_tokenizer

    tok = load_tokenizer(tokenizer)
    shaped = [
        {"traj_id": r["traj_id"], "messages": to_template(r["messages"]), "tools": openai_tools(r["tools"])}
        for r in rows
    ]
    return {r["traj_id"]: (len(r["input_ids"]), sum(r["assistant_masks"])) for r in render_messages(tok, shaped)}


def draw_rows(
    ids: list[str], size: dict[str, int], labels: dict[str, str], n: int, seed: int, target: int | None
) -> list[str]:
    """``n`` row ids: whole passes over ``ids``, then a seeded sample; with ``target``, rows are then swapped
    for rows of the same injected label until their tokens are within 0.1% of it (the label mix is kept)."""
    rng = random.Random(seed)
    passes, rest = divmod(n, len(ids))
    chosen = ids * passes + rng.sample(ids, rest)
    if target is None:
        return chosen
    by_label: dict[str, list[str]] = {}
    for i in ids:
        by_label.setdefault(labels[i], []).append(i)
    total = sum(size[i] for i in chosen)
    for _ in range(200 * n):
        if abs(total - target) <= target / 1000:
            break
        j = rng.randrange(n)
        swap = rng.choice(by_label[labels[chosen[j]]])
        if abs(total - target - size[chosen[j]] + size[swap]) < abs(total - target):
            total += size[swap] - size[chosen[j]]
            chosen[j] = swap
    return chosen


def run_arm_rows(ctx: StageContext, cfg: ArmRowsConfig) -> dict[str, Any]:
    """Write the rows one SFT arm trains on: copies of main-run rollouts (new ids, no verdict, unjudged), so
    that ``train.sft``, which trains on a run's accepted rows, trains on exactly these."""
    from trajkit.store import Store

    main = Store(Path(cfg.source))
    pool = pool_rows(main, cfg.rule)
    counts = token_counts(main, cfg.tokenizer)
    pool = [r for r in pool if r["traj_id"] in counts]
    labels = read_labels(main)
    size = {r["traj_id"]: counts[r["traj_id"]][0] for r in pool}
    chosen = draw_rows([r["traj_id"] for r in pool], size, labels, cfg.rows, cfg.seed, cfg.match_tokens)
    by_id = {r["traj_id"]: r for r in pool}
    out = []
    for k, tid in enumerate(chosen):
        out.append({**by_id[tid], "traj_id": content_id(tid, ctx.name, k), "verdict": None})
    ctx.write("trajectories", out)
    mix: dict[str, int] = {}
    for tid in chosen:
        mix[labels[tid]] = mix.get(labels[tid], 0) + 1
    return {
        "pool": len(pool),
        "rows": len(chosen),
        "distinct": len(set(chosen)),
        "epochs": len(chosen) / len(pool),
        "tokens": sum(counts[t][0] for t in chosen),
        "trained_tokens": sum(counts[t][1] for t in chosen),
        "labels": dict(sorted(mix.items())),
    }


ARM_ROWS = StageSpec(
    "bench.arm_rows",
    ArmRowsConfig,
    run_arm_rows,
    outputs=("trajectories",),
    help="The rows one SFT arm trains on, copied from the main run's rollouts.",
)


def read_labels(main: Any) -> dict[str, str]:
    """traj_id -> injected label of the main run's teacher rollouts (the bench's side file, beside the run)."""
    return json.loads((main.root.parent / "labels.json").read_text())


# ---------------------------------------------------------------- phase 1 (CPU): the data
def stage(store: Any, kind: str | StageSpec, cfg: dict[str, Any], name: str, times: dict[str, float]) -> dict:
    """Run one stage (validated config, manifest, resume: a completed stage is skipped) and time it."""
    from trajkit.runner import run_stage
    from trajkit.stages import get_stage

    spec = get_stage(kind) if isinstance(kind, str) else kind
    manifest = run_stage(store, spec, spec.config.model_validate(cfg), name=name, quiet=True)
    times[name] = manifest["seconds"]  # the run's own time (a completed stage, skipped now, keeps it)
    return manifest


def prepare(run: Path, s: dict[str, Any], times: dict[str, float]) -> dict[str, Any]:
    """Harvest, tasks, dedup, split, the held-out check, rollouts, judge, filter and held-out references, in
    ``RUN/data``; the teacher and judge served on loopback; every rollout's injected label to RUN/labels.json."""
    from trajkit.models.scripted_server import ScriptedServer
    from trajkit.store import Store

    store = Store(run / "data", create=True)
    servers = {n: {"command": "python", "args": ["-m", f"trajkit.envs.servers.{n}"]} for n in s["servers"]}
    (run / "servers.json").write_text(json.dumps({"mcpServers": servers}, indent=1))
    stage(store, "synth.harvest", {"servers": str(run / "servers.json")}, "harvest", times)
    with ScriptedServer(world.Teacher(), model="teacher") as server:

        def model(name: str) -> dict[str, Any]:
            spec = {"model": name, "backend": "openai", "base_url": server.base_url, "api_key_env": None}
            return spec | {"cache": False, "max_concurrency": 64}

        tasks = {"model": model("teacher"), "modes": s["modes"]}
        tasks |= {
            "requests_per_mode": s["requests"],
            "k": s["k"],
            "method": "vs_standard",
            "servers": list(s["servers"]),
        }
        tasks |= {"sampling": "uniform", "max_tokens": 4096, "seed": 0, "concurrency": 16}
        stage(store, "synth.tasks", tasks, "tasks", times)
        # near duplicates only clustered, never dropped: a template's tasks (same words, other numbers) form
        # one cluster, which the split keeps on one side; exact duplicates are dropped
        dedup = {"threshold": 0.5, "shingle": 1, "reject_near_duplicates": False}
        stage(store, "curate.dedup", dedup, "dedup", times)
        stage(store, "curate.split", {"held_out": s["held_out"], "seed": s["split_seed"]}, "split", times)
        check = heldout_check(run, store, times)
        episodes = {"system_prompt": SYSTEM, "max_turns": 6, "max_tokens": 512, "seed": 0}
        episodes |= {"concurrency": s["rollout_concurrency"], "pool_size": 1}  # calculator and units: one process each
        rollouts = {"model": model("teacher"), "where": "split = 'train'", "rollouts_per_task": s["rollouts"]}
        stage(store, "synth.rollouts", rollouts | episodes, "rollouts", times)
        write_labels(run, store)
        stage(store, "synth.judge", {"model": model("judge"), "concurrency": 16}, "judge", times)
        stage(store, "synth.filter", {}, "filter", times)
        reference = {"model": model(world.REFERENCE_MODEL), "where": "split = 'held_out'", "rollouts_per_task": 1}
        stage(store, "synth.rollouts", reference | episodes, "reference", times)
    return {"check": check} | data_summary(run, store)


def heldout_check(run: Path, store: Any, times: dict[str, float]) -> dict[str, Any]:
    """``curate.decontaminate`` of the held-out tasks (in a store of their own) against the training questions,
    8-word n-grams; a hit is rejected in the main run (so never evaluated)."""
    from trajkit.store import Store

    train = store.sql("SELECT question FROM tasks WHERE split = 'train' AND reject_reason IS NULL").to_pylist()
    path = run / "train_questions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in train))
    check = Store(run / "checks" / "heldout", create=True)
    stage(check, HELDOUT_COPY, {"source": str(store.root)}, "heldout", times)
    evals = [{"name": "train", "path": str(path), "fields": ["question"]}]
    found = stage(check, "curate.decontaminate", {"evals": evals, "n": 8}, "decontaminate", times)["summary"]
    stage(store, CONTAMINATED, {"check": str(check.root)}, "contaminated", times)
    return {
        "held_out": found["tasks"],
        "train_questions": len(train),
        "ngram": 8,
        "contaminated": found["contaminated"],
    }


def write_labels(run: Path, store: Any) -> None:
    """Each teacher rollout's injected label, from its question and sampling seed (the teacher's own draw)."""
    labels = {}
    for r in store.rows("trajectories", stage="rollouts"):
        question = next(m["content"] for m in r["messages"] if m["role"] == "user")
        labels[r["traj_id"]] = world.label(question.strip(), r["sampling"]["seed"])
    (run / "labels.json").write_text(json.dumps(labels, sort_keys=True))


REASON_GROUPS = (("status_", "agent loop"), ("verdict_", "verifier"), ("low_", "judge"), ("", "rules"))


def group_of(reason: str) -> str:
    """Which part of trajkit a filter reason comes from (its rules have no common prefix)."""
    return next(g for prefix, g in REASON_GROUPS if reason.startswith(prefix))


def data_summary(run: Path, store: Any) -> dict[str, Any]:
    """Tasks, templates and combinations per split; the filter's confusion matrix against the injected labels."""
    from trajkit.accepted import accepted_ids

    split = {r["task_id"]: r["split"] for r in store.rows("splits")}
    rejected = store.rejected("tasks")
    seen: dict[str, dict[str, set[str]]] = {"train": {"templates": set(), "combos": set()}}
    seen["held_out"] = {"templates": set(), "combos": set()}
    template_of = {}
    for t in store.rows("tasks"):
        found = world.parse(t["question"] or "")
        if found is None or t["task_id"] in rejected or t["task_id"] not in split:
            continue
        template_of[t["task_id"]] = found[0]
        seen[split[t["task_id"]]]["templates"].add(found[0].key)
        seen[split[t["task_id"]]]["combos"].add(found[0].combo)
    straddling = sorted(seen["train"]["templates"] & seen["held_out"]["templates"])
    held = [tid for tid, s in split.items() if s == "held_out" and tid in template_of]
    unseen_combo = {tid for tid in held if template_of[tid].combo not in seen["train"]["combos"]}
    labels = read_labels(store)
    keep = accepted_ids(store, "trajectories")
    why: dict[str, list[str]] = {}
    for r in store.rows("rejected"):
        if r["table_name"] == "trajectories":
            why.setdefault(r["row_id"], []).append(r["reason"])
    matrix: dict[str, dict[str, int]] = {}
    reasons: dict[str, dict[str, int]] = {}
    for r in store.rows("trajectories", stage="rollouts"):
        row = matrix.setdefault(labels[r["traj_id"]], {"accepted": 0, "rejected": 0})
        row["accepted" if r["traj_id"] in keep else "rejected"] += 1
        if r["traj_id"] in keep:
            continue
        per = reasons.setdefault(labels[r["traj_id"]], {})
        for group in {group_of(x) for x in why.get(r["traj_id"], [])}:
            per[group] = per.get(group, 0) + 1
    return {
        "tasks": {
            s: sum(1 for tid, x in split.items() if x == s and tid in template_of) for s in ("train", "held_out")
        },
        "templates": {s: sorted(v["templates"]) for s, v in seen.items()},
        "combos": {s: sorted(v["combos"]) for s, v in seen.items()},
        "templates_on_both_sides": straddling,
        "held_out_unseen_combo": len(unseen_combo),
        "held_out_groups": {tid: "unseen combo" if tid in unseen_combo else "seen combo" for tid in held},
        "held_out_unseen_template_seen_combo": len(held) - len(unseen_combo),
        "confusion": dict(sorted(matrix.items())),
        "rejected_by": dict(sorted(reasons.items())),
        "rollouts": sum(sum(v.values()) for v in matrix.values()),
    }


# ---------------------------------------------------------------- phase 2 (GPU): SFT arms, GRPO, evaluation
def arm_data(run: Path, student: str, s: dict[str, Any], seeds: list[int], times: dict[str, float]) -> dict:
    """Per seed, the rows of (b) (trajkit's accepted rollouts, repeated to steps x batch), then of (a) (every
    completed rollout, drawn to the same rows and tokens): each in a store of its own, ``RUN/arms/<arm>-s<seed>``."""
    from trajkit.store import Store

    out = {}
    for seed in seeds:
        common = {
            "source": str(run / "data"),
            "rows": s["sft_steps"] * s["sft_batch"],
            "seed": seed,
            "tokenizer": student,
        }
        b = Store(run / "arms" / f"b-s{seed}", create=True)
        out[f"b-s{seed}"] = stage(b, ARM_ROWS, common | {"rule": "accepted"}, "rows", times)["summary"]
        a = Store(run / "arms" / f"a-s{seed}", create=True)
        match = {"rule": "completed", "match_tokens": out[f"b-s{seed}"]["tokens"]}
        out[f"a-s{seed}"] = stage(a, ARM_ROWS, common | match, "rows", times)["summary"]
    return out


def sft_job(job: dict[str, Any]) -> dict[str, Any]:
    """``train.sft`` of one arm and seed on its own store's rows: one pass, steps x batch rows."""
    from trajkit.store import Store

    s, times = job["settings"], {}
    store = Store(Path(job["store"]))
    micro = s["sft_micro"]  # rows per forward pass: six processes' logits (49k vocabulary) must share the GPU
    sft = {"max_steps": s["sft_steps"], "per_device_train_batch_size": micro, "learning_rate": s["sft_lr"]}
    sft["gradient_accumulation_steps"] = s["sft_batch"] // micro
    sft |= {"lr_scheduler_type": "cosine", "warmup_steps": max(1, s["sft_steps"] // 20), "seed": job["seed"]}
    sft["max_length"] = None
    sft |= {"logging_steps": 1, "gradient_checkpointing": False}  # a 135M model needs no activation recompute
    t0 = time.time()
    manifest = stage(store, "train.sft", {"model": job["student"], "sft": sft}, "sft", times)
    losses = [r["loss"] for r in sorted(store.rows("train_metrics", stage="sft"), key=lambda r: r["step"])]
    return {
        "model": manifest["summary"]["output_dir"],
        "steps": manifest["summary"]["steps"],
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "train_s": time.time() - t0,
    }


def grpo_job(job: dict[str, Any]) -> dict[str, Any]:
    """(c): GRPO from (b)'s model of the same seed, with the tasks' MCP servers in the loop (TRL's
    environment_factory) and verifier rewards, in a copy of the main run (``RUN/grpo/c-s<seed>``)."""
    import yaml

    from trajkit.store import Store
    from trajkit.train.curriculum import run_curriculum

    s, run = job["settings"], Path(job["run"])
    work = copy_run(run / "data", run / "grpo" / f"c-s{job['seed']}")
    g, p = s["grpo_gens"], s["grpo_prompts"]
    grpo = {"num_generations": g, "per_device_train_batch_size": p * g, "max_completion_length": s["max_completion"]}
    grpo |= {"max_tool_calling_iterations": MAX_TURNS - 1, "learning_rate": s["grpo_lr"], "temperature": 1.0}
    grpo |= {"seed": job["seed"], "logging_steps": 1}
    stage_cfg = {"name": f"c-s{job['seed']}", "data": {"split": "train"}, "steps": s["grpo_steps"], "grpo": grpo}
    rewards = [{"name": "correctness"}, {"name": "tool_calls", "weight": 0.2}]
    defaults = {"rewards": rewards, "conciseness": {"alpha": 0.0}, "tools": True, "system_prompt": SYSTEM}
    defaults["compiled_generation"] = False  # a short run: compiling the decode costs more than it saves
    path = work / "curriculum.yaml"
    path.write_text(yaml.safe_dump({"model": job["model"], "defaults": defaults, "stages": [stage_cfg]}))
    t0 = time.time()
    [manifest] = run_curriculum(path, work)
    metrics = sorted(Store(work).rows("train_metrics", stage=manifest["stage"]), key=lambda r: r["step"])
    return {
        "model": manifest["summary"]["output_dir"],
        "steps": manifest["summary"]["steps"],
        "completions": manifest["summary"]["steps"] * p * g,
        "reward": [r["reward_mean"] for r in metrics],
        "pass_rate": [r["pass_rate"] for r in metrics],
        "train_s": time.time() - t0,
    }


def copy_run(source: Path, dest: Path) -> Path:
    """A working copy of a run directory (its tables; no models), unless one is there already."""
    if not dest.exists():
        tmp = dest.with_name(dest.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(source, tmp, ignore=shutil.ignore_patterns("models", "_cache", "plots"))
        tmp.rename(dest)
    return dest


def eval_job(job: dict[str, Any]) -> dict[str, Any]:
    """One model on the held-out tasks (``eval.passk``, n samples each), on the held-out reference trajectories
    (``eval.tools``: tool-call accuracy, well-formed calls) and on BFCL's non-live AST subset (``eval.tools``
    with ``bfcl``), in a copy of the main run (``RUN/eval/<name>``)."""
    from trajkit.store import Store

    s, run, times = job["settings"], Path(job["run"]), {}
    work = Store(copy_run(run / "data", run / "eval" / job["name"]))
    spec = {"model": job["model"], "backend": "transformers", "max_batch_size": s["batch"], "cache": False}
    spec["dtype"] = s["eval_dtype"]  # bf16 on the GPU: seven processes' KV caches at batch 256 fit
    t0 = time.time()
    passk = {"models": [spec], "split": "held_out", "n": s["eval_n"], "ks": [1, s["eval_n"]], "temperature": 0.7}
    passk |= {"seed": 1, "system_prompt": SYSTEM, "max_tokens": s["eval_max_tokens"], "max_turns": MAX_TURNS}
    passk |= {"concurrency": s["concurrency"], "limit": s["eval_tasks"]}
    stage(work, "eval.passk", passk, "passk", times)
    per_task = {
        r["task_id"]: r["correct"] / r["samples"] for r in work.rows("eval_passk", stage="passk") if r["samples"]
    }
    tools = {"models": [spec], "split": "held_out", "max_tokens": s["eval_max_tokens"], "limit": s["tools_limit"]}
    tools["concurrency"] = s["concurrency"]
    stage(work, "eval.tools", tools, "tools", times)
    turns = [r for r in work.rows("eval_tools", stage="tools") if r["correct"] is not None]
    called = [r["correct"] for r in turns if json.loads(r["expected"] or "[]")]
    bfcl = {
        "models": [spec],
        "bfcl": list(BFCL_CATEGORIES),
        "limit": s["bfcl_limit"],
        "max_tokens": s["bfcl_max_tokens"],
    }
    stage(work, "eval.tools", bfcl | {"concurrency": s["concurrency"]}, "bfcl", times)
    official = bfcl_official(work.rows("eval_tools", stage="bfcl"), s["bfcl_limit"])
    made, good = well_formed(turns, work)
    return {
        "model": job["model"],
        "pass1": mean(list(per_task.values())),
        "pass1_ci": bootstrap(list(per_task.values())),
        "per_task": per_task,
        "tool_call_accuracy": mean(called),
        "tool_call_ci": bootstrap(called),
        "tool_turns": len(called),
        "well_formed": good / made if made else None,
        "calls_made": made,
        "bfcl": mean(list(official.values())),
        "bfcl_ci": bootstrap(list(official.values())),
        "bfcl_entries": len(official),
        "bfcl_per_entry": official,
        "eval_s": time.time() - t0,
        "stage_s": times,
    }


def well_formed(turns: list[dict[str, Any]], store: Any) -> tuple[int, int]:
    """(calls the model made on the replayed turns, those that name an offered tool with arguments valid
    against its input schema)."""
    import jsonschema

    offered = {
        r["traj_id"]: {t["name"]: json.loads(t["input_schema"] or "{}") for t in r["tools"] or []}
        for r in store.rows("trajectories", ["traj_id", "tools"], stage="reference")
    }
    made = good = 0
    for r in turns:
        for call in json.loads(r["predicted"] or "[]"):
            made += 1
            schema = offered.get(r["traj_id"], {}).get(call.get("name"))
            args = call.get("arguments")
            good += (
                schema is not None and isinstance(args, dict) and jsonschema.Draft202012Validator(schema).is_valid(args)
            )
    return made, good


def bfcl_official(rows: list[dict[str, Any]], limit: int) -> dict[str, bool]:
    """Entry id -> BFCL's own ``ast_checker`` verdict on the model's stored calls (an unreadable call fails)."""
    from trajkit.eval import bfcl
    from trajkit.eval.toolcall import Call

    check = bfcl.official_checker()
    entries = {e.id: e for c in BFCL_CATEGORIES for e in bfcl.load(c, limit)}
    out = {}
    for r in rows:
        if r["correct"] is None:
            continue
        stored = json.loads(r["predicted"])
        readable = all(c.get("name") is not None and isinstance(c.get("arguments"), dict) for c in stored)
        out[r["traj_id"]] = readable and check(entries[r["traj_id"]], [Call(c["name"], c["arguments"]) for c in stored])
    return out


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def bootstrap(values: list[float], reps: int = 2000, seed: int = 0) -> list[float] | None:
    """The 95% bootstrap interval of the mean (resampling the items)."""
    import numpy as np

    if not values:
        return None
    x = np.asarray(values, dtype=float)
    means = x[np.random.default_rng(seed).integers(0, len(x), (reps, len(x)))].mean(axis=1)
    return [float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))]


# ---------------------------------------------------------------- running the phases
JOBS = {"sft": sft_job, "grpo": grpo_job, "eval": eval_job}


def run_jobs(jobs: list[dict[str, Any]], parallel: int, deadline: float, done: Any) -> None:
    """Run jobs, ``parallel`` at a time, each in a process of its own (in this process when ``parallel`` is 1);
    ``done(job, result)`` as each ends. A job not finished by ``deadline`` is stopped, one not started is not
    started: both are reported with an ``error``."""
    if parallel <= 1:
        for job in jobs:
            late = time.time() > deadline
            done(job, {"error": "not started: the time budget ran out"} if late else JOBS[job["kind"]](job))
        return
    waiting, running = list(jobs), []
    while waiting or running:
        while waiting and len(running) < parallel and time.time() < deadline:
            job = waiting.pop(0)
            path = Path(job["run"]) / "jobs" / f"{job['kind']}-{job['name']}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(job))
            log = path.with_suffix(".log").open("w")
            env = {**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1", "TOKENIZERS_PARALLELISM": "false"}
            cmd = [sys.executable, __file__, "--job", str(path)]
            running.append(
                (job, path, time.time(), subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env))
            )
            print(f"{job['kind']} {job['name']}: started", flush=True)
        for item in list(running):
            job, path, t0, proc = item
            if proc.poll() is None:
                continue
            running.remove(item)
            out = path.with_suffix(".out.json")
            if proc.returncode == 0 and out.is_file():
                result = json.loads(out.read_text())
            else:
                tail = path.with_suffix(".log").read_text()[-2000:]
                result = {"error": f"exit status {proc.returncode}: {tail}"}
            print(
                f"{job['kind']} {job['name']}: {'failed' if 'error' in result else 'done'} in {time.time() - t0:.0f}s"
            )
            done(job, result)
        if time.time() > deadline:
            for job, _, _, proc in running:
                proc.kill()
                done(job, {"error": "stopped: the time budget ran out"})
            for job in waiting:
                done(job, {"error": "not started: the time budget ran out"})
            return
        time.sleep(0.5)


class Bench:
    """The results of one bench directory (``RUN/results.json``), saved with the table and PNG after each job."""

    def __init__(self, run: Path, out: Path, base: dict[str, Any]):
        self.run, self.out = run, out
        path = run / "results.json"
        self.results = json.loads(path.read_text()) if path.is_file() else {}
        self.results.update(base)
        for key in ("train", "eval", "errors", "stage_s", "phase_s"):
            self.results.setdefault(key, {})

    def save(self, report: bool = False) -> None:
        """results.json (in the run folder and ``--out``); with ``report`` the table and PNG too."""
        text = json.dumps(self.results, indent=1)
        (self.run / "results.json").write_text(text)
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "results.json").write_text(text)
        if report:
            write_report([self.results], self.out)

    def record(self, job: dict[str, Any], result: dict[str, Any]) -> None:
        section = "train" if job["kind"] in ("sft", "grpo") else "eval"
        if "error" in result:
            self.results["errors"][f"{job['kind']} {job['name']}"] = result["error"]
        else:
            self.results[section][job["name"]] = result
            self.results["errors"].pop(f"{job['kind']} {job['name']}", None)
        self.save()


def check_containment(allow_weaker: bool) -> str:
    """Whether MCP servers run contained here; without containment the bench stops unless
    ``--allow-weaker-sandbox`` (then servers run as plain processes, for this bench only, and it says so)."""
    from trajkit.confine.isolation import ALLOW_WEAKER_ENV, ProtectionMissing
    from trajkit.envs import contain

    try:
        return "contained" if contain.enabled() else "uncontained (TRAJKIT_UNCONTAINED)"
    except ProtectionMissing as e:
        if not allow_weaker:
            print(str(e), file=sys.stderr)
            raise SystemExit(2) from None
        os.environ[ALLOW_WEAKER_ENV] = "1"
        note = f"weaker sandbox: {e}; --allow-weaker-sandbox given, so MCP servers run uncontained for this bench"
        print(note, flush=True)
        return note


def phases(args: argparse.Namespace, s: dict[str, Any], bench: Bench) -> None:
    """sft: the SFT arms, then the evaluation of the raw student and of every SFT model; grpo: (c) from each
    seed's (b), then its evaluation. A phase skips the jobs that have a result already (a rerun continues)."""
    run, res = args.run, bench.results
    deadline = time.time() + args.budget_s if args.budget_s else float("inf")
    common = {"run": str(run), "settings": s, "student": str(args.student)}
    if "sft" in args.phases:
        t0 = time.time()
        if not res.get("arms") or any(f"{a}-s{x}" not in res["arms"] for a in "ab" for x in args.seeds):
            res["arms"] = arm_data(run, str(args.student), s, args.seeds, res["stage_s"])
            bench.save()
        jobs = [
            common | {"kind": "sft", "name": f"{a}-s{x}", "seed": x, "store": str(run / "arms" / f"{a}-s{x}")}
            for a in "ab"
            for x in args.seeds
            if f"{a}-s{x}" not in res["train"]
        ]
        run_jobs(jobs, s["parallel"], deadline, bench.record)
        models = {"d": str(args.student)} | {n: r["model"] for n, r in res["train"].items() if n[0] in "ab"}
        jobs = [common | {"kind": "eval", "name": n, "model": m} for n, m in models.items() if n not in res["eval"]]
        run_jobs(jobs, s["parallel"], deadline, bench.record)
        res["phase_s"]["sft"] = round(time.time() - t0, 1)
        bench.save()
    if "grpo" in args.phases:
        t0 = time.time()
        jobs = [
            common | {"kind": "grpo", "name": f"c-s{x}", "seed": x, "model": res["train"][f"b-s{x}"]["model"]}
            for x in args.seeds
            if f"c-s{x}" not in res["train"] and f"b-s{x}" in res["train"]
        ]
        run_jobs(jobs, s["parallel"], deadline, bench.record)
        models = {n: r["model"] for n, r in res["train"].items() if n[0] == "c"}
        jobs = [common | {"kind": "eval", "name": n, "model": m} for n, m in models.items() if n not in res["eval"]]
        run_jobs(jobs, s["parallel"], deadline, bench.record)
        res["phase_s"]["grpo"] = round(time.time() - t0, 1)
    bench.save(report=not args.gpu)  # the GPU image has no matplotlib: --report draws the table and PNG here


# ---------------------------------------------------------------- the report
def merged(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Several results.json (e.g. one per GPU call) as one: later files add jobs and replace settings."""
    out: dict[str, Any] = {}
    for r in results:
        for key, value in r.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict) and key in ("train", "eval", "arms"):
                out[key] = {**out[key], **value}
            else:
                out[key] = value
    return out


def arm_runs(res: dict[str, Any], arm: str, section: str = "eval") -> list[dict[str, Any]]:
    """The results of every seed of an arm (the raw student has one)."""
    return [v for k, v in sorted(res.get(section, {}).items()) if k == arm or k.startswith(f"{arm}-s")]


def seed_mean(runs: list[dict[str, Any]], key: str) -> dict[str, float]:
    """Per item (task or entry), the mean over seeds of ``key``'s per-item values (items every seed has)."""
    common = set.intersection(*(set(r[key]) for r in runs))
    return {i: sum(float(r[key][i]) for r in runs) / len(runs) for i in sorted(common)}


def compare(res: dict[str, Any], better: str, worse: str, key: str = "per_task") -> dict[str, Any] | None:
    """``better`` minus ``worse`` on the items both have (seed means): difference, paired 95% bootstrap
    interval over items, the seed spreads of both, and whether the difference beats the spreads and the interval."""
    hi, lo = arm_runs(res, better), arm_runs(res, worse)
    if not hi or not lo:
        return None
    a, b = seed_mean(hi, key), seed_mean(lo, key)
    items = sorted(set(a) & set(b))
    diffs = [a[i] - b[i] for i in items]
    stat = "pass1" if key == "per_task" else "bfcl"
    spread = [max(r[stat] for r in runs) - min(r[stat] for r in runs) for runs in (hi, lo)]
    ci = bootstrap(diffs)
    diff = mean(diffs)
    return {
        "diff": diff,
        "ci": ci,
        "spread": spread,
        "items": len(items),
        "beats": bool(diff > max(spread) and ci[0] > 0),
    }


def table(res: dict[str, Any]) -> str:
    data, lines = res.get("data", {}), []
    lines.append(
        f"Tool learning: student {res.get('student_name', res.get('student'))}; {res.get('device', '?')}; "
        f"MCP servers {res.get('containment', '?')}"
    )
    if data:
        t, c = data["tasks"], data["check"]
        lines.append(
            f"tasks: {t['train']} train, {t['held_out']} held out ({len(data['templates']['held_out'])} of "
            f"{len(data['templates']['train']) + len(data['templates']['held_out'])} templates; "
            f"{data['held_out_unseen_combo']} held-out tasks use a tool combination no training task uses); templates "
            f"on both sides: {len(data['templates_on_both_sides'])}; decontaminate ({c['ngram']}-grams against "
            f"{c['train_questions']} training questions): {c['contaminated']} of {c['held_out']} held-out tasks dropped"
        )
        lines.append(f"teacher rollouts on train tasks: {data['rollouts']}; accepted by trajkit x injected label:")
        groups = [g for _, g in REASON_GROUPS]
        lines.append(
            f"{'label':18}{'rollouts':>9}{'accepted':>9}{'rejected':>9}   rejected by (a row may count twice): "
            + ", ".join(groups)
        )
        for label, row in data["confusion"].items():
            by = data["rejected_by"].get(label, {})
            lines.append(
                f"{label:18}{row['accepted'] + row['rejected']:>9}{row['accepted']:>9}{row['rejected']:>9}   "
                + " / ".join(str(by.get(g, 0)) for g in groups)
            )
    if res.get("arms"):
        lines.append("SFT rows per arm (steps x batch, one pass): pool, rows, epochs, tokens, trained tokens, labels")
        for name, a in sorted(res["arms"].items()):
            lines.append(
                f"  {name}: pool {a['pool']}, rows {a['rows']} ({a['distinct']} distinct), {a['epochs']:.2f} epochs, "
                f"{a['tokens']} tokens, {a['trained_tokens']} trained; {a['labels']}"
            )
    for name, t in sorted(res.get("train", {}).items()):
        if name[0] == "c" and t["reward"]:
            reward = t["reward"]
            lines.append(
                f"  {name}: GRPO {t['steps']} steps, {t['completions']} completions, reward {reward[0]:.3f} -> "
                f"{sum(reward[-3:]) / len(reward[-3:]):.3f} (last 3), {t['train_s']:.0f}s"
            )
    lines.append("")
    n = res.get("settings", {}).get("eval_n")
    lines.append(f"held-out tasks, n = {n} samples each; mean over seeds [95% bootstrap over tasks] (seed spread):")
    head = f"{'arm':34}{'pass@1':>26}{'unseen combo':>14}{'seen combo':>12}{'tool-call acc':>15}{'well-formed':>13}"
    lines.append(head + f"{'BFCL AST':>22}")
    for arm in ARMS:
        runs = arm_runs(res, arm)
        lines.append(
            f"{ARM_NAMES[arm]:34}" + (arm_cells(runs, data.get("held_out_groups", {})) if runs else " not run")
        )
    limit = res.get("settings", {}).get("bfcl_limit")
    lines.append(
        f"BFCL AST: BFCL v4's non-live {', '.join(BFCL_CATEGORIES)}, the first {limit} entries of each, scored by "
        "BFCL's own ast_checker; tool-call accuracy: turns of the held-out reference trajectories that call"
    )
    lines.append("")
    for better, worse, what in (("b", "a", "the curation pays"), ("c", "b", "the RL stage pays")):
        c = compare(res, better, worse)
        if c:
            lines.append(
                f"goal ({better}) > ({worse}), {what}: {c['diff']:+.3f} pass@1, paired 95% CI [{c['ci'][0]:+.3f}, "
                f"{c['ci'][1]:+.3f}] over {c['items']} tasks, seed spreads {c['spread'][0]:.3f} / {c['spread'][1]:.3f}: "
                + ("met" if c["beats"] else "NOT met")
            )
    for arm in "abc":
        c = compare(res, arm, "d", "bfcl_per_entry")
        if c:
            held = c["ci"][1] >= 0  # not lower by more than its interval: the interval reaches zero
            lines.append(
                f"goal BFCL not lower after ({arm}): {c['diff']:+.3f} vs the raw student, paired 95% CI "
                f"[{c['ci'][0]:+.3f}, {c['ci'][1]:+.3f}] over {c['items']} entries: " + ("met" if held else "NOT met")
            )
    for job, error in sorted(res.get("errors", {}).items()):
        lines.append(f"{job}: {error.splitlines()[-1] if error else error}")
    return "\n".join(lines)


def arm_cells(runs: list[dict[str, Any]], groups: dict[str, str]) -> str:
    """One arm's row: pass@1 (seed mean, interval, spread), by combination, tool calls, BFCL."""
    per = seed_mean(runs, "per_task")
    ci = bootstrap(list(per.values()))
    spread = max(r["pass1"] for r in runs) - min(r["pass1"] for r in runs)
    pass1 = f"{mean(list(per.values())):.3f} [{ci[0]:.3f}, {ci[1]:.3f}] ({spread:.3f})"
    by = [mean([v for t, v in per.items() if groups.get(t) == g]) for g in ("unseen combo", "seen combo")]
    accuracy = mean([r["tool_call_accuracy"] for r in runs if r["tool_call_accuracy"] is not None])
    formed = mean([r["well_formed"] for r in runs if r["well_formed"] is not None])
    entries = seed_mean(runs, "bfcl_per_entry")
    bci = bootstrap(list(entries.values()))
    bfcl = f"{mean(list(entries.values())):.3f} [{bci[0]:.3f}, {bci[1]:.3f}]"
    return f"{pass1:>26}{fmt3(by[0]):>14}{fmt3(by[1]):>12}{fmt3(accuracy):>15}{fmt3(formed):>13}{bfcl:>22}"


def fmt3(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def plot(res: dict[str, Any], path: Path) -> None:
    """Held-out pass@1, tool-call accuracy, well-formed calls and BFCL per arm (bars: seed means; dots: seeds),
    and GRPO's reward per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("pass1", "held-out pass@1"), ("tool_call_accuracy", "tool-call accuracy"))
    panels += (("well_formed", "well-formed calls"), ("bfcl", "BFCL non-live AST"))
    fig, axes = plt.subplots(1, 5, figsize=(20, 4))
    arms = [a for a in ARMS if arm_runs(res, a)]
    for ax, (key, title) in zip(axes, panels):
        for i, arm in enumerate(arms):
            runs = arm_runs(res, arm)
            values = [r[key] or 0.0 for r in runs]
            height = sum(values) / len(values)
            items = {"pass1": "per_task", "bfcl": "bfcl_per_entry"}.get(key)  # the 95% bootstrap interval
            ci = bootstrap(list(seed_mean(runs, items).values())) if items else None
            err = [[max(0.0, height - ci[0])], [max(0.0, ci[1] - height)]] if ci else None
            ax.bar(i, height, yerr=err, capsize=4, color="lightgray", edgecolor="black")
            ax.scatter([i] * len(values), values, color="black", s=12, zorder=3)
        ax.set_xticks(range(len(arms)), [f"({a})" for a in arms])
        ax.set_title(title)
        ax.set_ylim(0, 1)
    for name, t in sorted(res.get("train", {}).items()):
        if name[0] == "c":
            axes[4].plot(range(1, len(t["reward"]) + 1), t["reward"], label=name)
    axes[4].set_title("(c) GRPO reward per step")
    axes[4].set_xlabel("step")
    if res.get("train"):
        axes[4].legend(fontsize=7)
    fig.suptitle("Does trajkit's tool data make an agent better? (d raw, a all completed, b accepted, c b + GRPO)")
    fig.subplots_adjust(left=0.03, right=0.99, bottom=0.12, top=0.84, wspace=0.2)  # fixed: tight_layout costs a draw
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(results: list[dict[str, Any]], out: Path) -> str:
    res = merged(results)
    out.mkdir(parents=True, exist_ok=True)
    text = table(res)
    (out / "table.txt").write_text(text + "\n")
    plot(res, out / "tool_learning.png")
    return text


STUDENT = "SmolLM2-135M-Instruct, Q4_1 dequantized"
ENV = "export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false"
UNPACK = (  # the wheels, installed here for CPython 3.12 (GPU_BUNDLE_SITE=1 make gpu-bundle), joined and unpacked
    "mkdir -p /tmp/gpu/site-packages && cat /tmp/relay/site.tar.xz.aa .whl/b/site.tar.xz.ab | python3 -c "
    "\"import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz').extractall('/tmp/gpu/site-packages', filter='data')\""
)
ON_PATH = (  # on the interpreter's own path: MCP servers are processes of their own and do not inherit PYTHONPATH
    "echo \"import sys; sys.path[:0] = ['/tmp/gpu/site-packages', '$PWD']\" > "
    "$(python3 -c 'import site; print(site.getsitepackages()[0])')/000-trajkit.pth"
)


def gpu_commands() -> str:
    """The three device calls (what each carries, its command and size), from ``.relay`` (scripts/gpu_relay.sh
    with RELAY_PART_MIB=47) and ``.whl/a``, ``.whl/b`` (GPU_BUNDLE_SITE=1 make gpu-bundle)."""
    import hashlib

    parts = [ROOT / ".relay" / "a" / "part.a", ROOT / ".relay" / "b" / "part.b"]
    missing = [str(p.relative_to(ROOT)) for p in parts if not p.is_file()]
    if missing:
        return f"missing {', '.join(missing)}: RELAY_PART_MIB=47 scripts/gpu_relay.sh GGUF first"
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.read_bytes())
    flags = f"--gpu --run /tmp/tool-run --out $OUT --student /tmp/smollm2 --student-name '{STUDENT}' "
    flags += "--allow-weaker-sandbox"
    join = (
        f"cat /tmp/relay/part.a .relay/b/part.b > /tmp/relay/m.gguf && echo '{digest.hexdigest()}  /tmp/relay/m.gguf'"
    )
    sft = (
        f"set -e; {ENV}; {join} | sha256sum -c - || exit 3; {UNPACK}; {ON_PATH}; "
        "python3 -m trajkit.cli model gguf /tmp/relay/m.gguf /tmp/smollm2; rm -rf /tmp/tool-run; "
        f"cp -r bench/out/tool-run /tmp/tool-run; python3 bench/tool_learning.py {flags} --phases sft --budget-s 400"
    )
    calls = [
        ([".relay/a", ".whl/a"], "mkdir -p /tmp/relay && cp .relay/a/part.a .whl/a/site.tar.xz.aa /tmp/relay/"),
        ([".relay/b", ".whl/b", "bench/out/tool-run"], sft),
        (
            [],
            f"{ENV}; [ -d /tmp/tool-run ] || exit 3; python3 bench/tool_learning.py {flags} --phases sft,grpo --budget-s 420",
        ),
    ]
    tracked = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    )
    tree = sum((ROOT / f).stat().st_size for f in tracked.stdout.decode().split("\0") if f and (ROOT / f).is_file())
    lines = ["Issue these device calls back to back (each within ~30 s of the last):"]
    for i, (carry, command) in enumerate(calls, 1):
        size = tree + sum(f.stat().st_size for c in carry for f in (ROOT / c).rglob("*") if f.is_file())
        lines += [f"call {i}: carry {json.dumps(carry)} ({size / 2**20:.1f} MiB; {len(command)} characters)", command]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepare", action="store_true", help="the data run, on CPU")
    parser.add_argument("--gpu", action="store_true", help="--phases on the GPU, from a prepared --run")
    parser.add_argument("--tiny", action="store_true", help="everything on CPU at tiny sizes (the test)")
    parser.add_argument("--report", type=Path, nargs="+", help="the table and PNG again from these results.json")
    parser.add_argument("--run", type=Path, default=ROOT / "bench" / "out" / "tool-run", help="the bench's run folder")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "tool", help="results.json, table, PNG")
    parser.add_argument("--student", type=Path, help="the student model folder (default with --tiny: a tiny model)")
    parser.add_argument("--student-name", help="how the report names the student (default: its folder's name)")
    parser.add_argument("--seeds", default="0,1,2", help="seeds of arms (a), (b) and (c)")
    parser.add_argument("--phases", default="sft,grpo", help="sft: (a), (b) and their eval; grpo: (c) and its eval")
    parser.add_argument("--budget-s", type=float, help="no job runs past this many seconds (default: no limit)")
    parser.add_argument("--parallel", type=int, default=7, help="jobs at once on the GPU (processes)")
    parser.add_argument("--requests", type=int, default=80, help="synth tasks requests per mode (k = 5 each)")
    parser.add_argument("--sft-steps", type=int, default=120, help="SFT optimizer steps of (a) and (b), batch 16")
    parser.add_argument("--grpo-steps", type=int, default=20, help="GRPO steps of (c), 8 prompts x 8 generations")
    parser.add_argument("--eval-tasks", type=int, default=200, help="held-out tasks evaluated (first N by id)")
    parser.add_argument("--allow-weaker-sandbox", action="store_true", help="run MCP servers uncontained if need be")
    parser.add_argument("--gpu-commands", action="store_true", help="print the three device calls and their carry")
    parser.add_argument("--job", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.gpu_commands:
        print(gpu_commands())
        return
    if args.job:
        job = json.loads(args.job.read_text())
        result = JOBS[job["kind"]](job)
        args.job.with_suffix(".out.json").write_text(json.dumps(result))
        return
    if args.report:
        print(write_report([json.loads((d / "results.json").read_text()) for d in args.report], args.out))
        return
    if not (args.prepare or args.gpu or args.tiny):
        print("skipped: tool_learning needs --prepare (CPU), --gpu (H200) or --tiny (CPU smoke version)")
        return
    import torch

    if args.gpu and not torch.cuda.is_available():
        print("skipped: --gpu needs a CUDA GPU")
        return
    args.seeds = [int(x) for x in args.seeds.split(",")]
    args.phases = args.phases.split(",")
    s = settings(args)
    args.run.mkdir(parents=True, exist_ok=True)
    if args.student is None and args.tiny:
        from trajkit.models.tiny import make_tiny_model

        args.student = args.run / "student"
        if not (args.student / "config.json").is_file():
            make_tiny_model(args.student, seed=0)
    base = {"settings": s, "seeds": args.seeds, "student": str(args.student) if args.student else None}
    base["student_name"] = args.student_name or (args.student.name if args.student else None)
    base["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    base["containment"] = check_containment(args.allow_weaker_sandbox)
    bench = Bench(args.run, args.out, base)
    res = bench.results
    if args.prepare or args.tiny:
        t0 = time.time()
        res["data"] = prepare(args.run, s, res["stage_s"])
        res["phase_s"]["prepare"] = round(time.time() - t0, 1)
        bench.save(report=not (args.gpu or args.tiny))
    if args.gpu or args.tiny:
        if args.student is None:
            raise SystemExit("--gpu needs --student")
        phases(args, s, bench)
    print(table(res))


if __name__ == "__main__":
    main()
