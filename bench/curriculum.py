"""Does the curation pay? DRIVE's curriculum ablation, through trajkit's own stages (issue 23).

    python bench/curriculum.py --gpu --out DIR            # one H200: every stage, seeds 0 and 1
    python bench/curriculum.py --report DIR [DIR ...]     # the table and PNG again, merging results.json files
    python bench/curriculum.py --tiny --out DIR           # a tiny model on CPU, a handful of steps (the test)

The task family: "What is a plus b? Answer with the number." with two 3-digit
numbers, graded by the number of carries (level 0..3). The answer is the sum as
plain digits; the verifier (``exact_answer``, a custom verifier, so it runs
in-process: no sandbox and no math-verify on the GPU image) passes a completion
whose answer, after the chat template's empty think block, is exactly the sum.
Plain arithmetic, not calculator-server tool calls: a from-scratch 4M-parameter
model would first have to learn the tool-call format from SFT, and every GRPO
rollout would run the MCP agent loop with its server processes, which neither
the 10-minute GPU commands nor the GPU image (no mcp) allow; the curation under
test (tags, curriculum, generations per prompt) is the same either way.

Every step is a trajkit stage (``trajkit.runner.run_stage``; GRPO arms through
curriculum files, ``trajkit.train.curriculum.run_curriculum``), in one run directory:

1. ``curate.import`` of the tasks through a custom task source (``task_records``);
2. ``curate.split`` (a fifth held out);
3. ``bench.reference`` (``REFERENCE`` below): the reference solution of every
   train task of the easier half (levels 0 and 1) as a completed trajectory;
4. ``train.sft`` from a fresh random Qwen2-shaped model (``LEARNING_SHAPE`` of
   ``bench/grpo_common.py``), in chunks of 100 steps (``sft-1``, ``sft-2``, ...
   each from the last) until held-out pass@1 (``heldout_pass1``, shared with the
   parity bench) reaches 0.2 (target [0.2, 0.6]; outside it is reported, not raised);
5. ``curate.passk`` with the warm start, k = 8, seed 0, on the first ``--tag-tasks``
   tasks by id (half of them: the rest only add SFT data), difficulty from pass@1;
6. ``curate.curriculum``: the hard stage = the train tasks tagged hard, with twice
   the generations per prompt (the tiny CPU version takes medium too);
7. per GRPO seed (``--seeds``), ``train.grpo`` in three arms at equal total
   completions (steps x prompts x generations; lr, batch and sampling alike):
   (a) one stage on every train task, G generations per prompt; (b) broad (every
   train task tagged hard, medium or easy: trivial and unsolved dropped) with G,
   then the hard stage with 2G generations and half the prompts, half the steps each;
   (c) hard only, 2G; reward = the verifier (binary), conciseness off;
8. ``eval.passk`` of the warm start and that seed's arms on the first
   ``--eval-tasks`` held-out tasks (by id), n = 8, seed 1 (fresh samples, not
   the tagging ones, so regression to the mean from tagging counts for none),
   pass@1 and pass@8 per difficulty bucket (the warm start's tags) and per level.

GPU (``--gpu``): all of it runs on the one H200, in one command (about 5-9
minutes; the machine keeps nothing, so the command builds the run from
nothing). It carries the source tree and the wheels ``make gpu-bundle`` puts in
``.whl/`` (trl, datasets, pydantic, duckdb and their needs; the image has torch
2.11, transformers 5.17, accelerate, pyarrow, matplotlib). The run directory
goes to ``--run-dir`` (outside ``$OUT``); what comes back, under ``--out``, is
three files: ``results.json`` (rewritten after every phase, so a command cut
short still returns the seeds that finished), ``table.txt`` and ``curriculum.png``
(reward per step per arm). If only seed 0 finished, run again with ``--seeds 1``
into another folder and merge the two here with ``--report``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pydantic import Field

from bench.grpo_common import LEARNING_SHAPE, heldout_pass1
from trajkit.config import StageConfig
from trajkit.runner import StageContext, StageSpec
from trajkit.schema import content_id

VERIFIER = "bench.curriculum:exact_answer"
LEVELS = (0, 1, 2, 3)  # carries of a 3-digit + 3-digit addition
EASY_LEVELS = (0, 1)  # the easier half: reference solutions for the warm start
ARMS = ("a", "b", "c")
ARM_NAMES = {"a": "(a) one stage, all", "b": "(b) broad, then hard", "c": "(c) hard only"}
MAX_TOKENS = 12  # the template's empty think block (4 tokens), up to 4 digits, end of turn
BUCKETS = ("unsolved", "hard", "medium", "easy", "trivial", "unknown", "all")  # unknown: an untagged task


def carries(a: int, b: int) -> int:
    n, carry = 0, 0
    while a or b:
        carry = (a % 10 + b % 10 + carry) >= 10
        n += carry
        a, b = a // 10, b // 10
    return n


def task_records(per_level: int, seed: int = 0) -> list[dict[str, Any]]:
    """The custom task source: ``per_level`` distinct additions of two 3-digit numbers per level (carries)."""
    rng = random.Random(seed)
    seen: set[tuple[int, int]] = set()
    out: list[dict[str, Any]] = []
    for level in LEVELS:
        made = 0
        while made < per_level:
            a, b = rng.randint(100, 999), rng.randint(100, 999)
            if carries(a, b) != level or (a, b) in seen:
                continue
            seen.add((a, b))
            made += 1
            out.append(
                {
                    "id": f"{a}+{b}",
                    "question": f"What is {a} plus {b}? Answer with the number.",
                    "answer": str(a + b),
                    "verifier": VERIFIER,
                    "level": level,
                }
            )
    return out


def exact_answer(completion: str, spec: dict[str, Any], context: dict[str, Any]) -> bool:
    """The verifier: the answer (after any ``<think>`` block the chat template adds) is exactly the sum."""
    return completion.rsplit("</think>", 1)[-1].strip() == spec["answer"]


class ReferenceConfig(StageConfig):
    levels: list[int] = Field(default_factory=lambda: list(EASY_LEVELS), description="Task levels to write.")
    split: str = Field("train", description="Only tasks of this split.")


def run_reference(ctx: StageContext, cfg: ReferenceConfig) -> dict[str, Any]:
    """One completed trajectory per chosen task: the question, then the reference answer."""
    split = {r["task_id"]: r["split"] for r in ctx.store.rows("splits")}
    done = ctx.done("trajectories")
    rows = []
    for t in sorted(ctx.store.rows("tasks"), key=lambda t: t["task_id"]):
        level = json.loads(t["metadata"] or "{}").get("level")
        if level not in cfg.levels or split.get(t["task_id"]) != cfg.split:
            continue
        traj_id = content_id("reference", t["task_id"])
        if traj_id in done:
            continue
        answer = json.loads(t["verifier"]["spec"])["answer"]
        rows.append(
            {
                "traj_id": traj_id,
                "task_id": t["task_id"],
                "rollout_index": 0,
                "model": "reference",
                "backend": "reference",
                "messages": [{"role": "user", "content": t["question"]}, {"role": "assistant", "content": answer}],
                "status": "completed",
                "roles": ["user", "assistant"],
                "num_turns": 1,
                "num_tool_calls": 0,
                "final_answer": answer,
            }
        )
    ctx.write("trajectories", rows)
    return {"trajectories": len(rows)}


REFERENCE = StageSpec(
    "bench.reference",
    ReferenceConfig,
    run_reference,
    inputs=("tasks", "splits"),
    outputs=("trajectories",),
    help="Reference solutions of the chosen tasks as completed trajectories (the warm start's SFT data).",
)


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The run's sizes: the H200 ones, or a tiny CPU version."""
    if args.tiny:
        return {
            "per_level": 8,
            "shape": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2},
            "sft_chunk": 80,
            "sft_batch": 16,
            "sft_lr": 3e-3,
            "sft_chunks": 1,
            "eval_tasks": None,
            "tag_tasks": None,
            "target": (0.0, 1.0),
            "k": 8,
            "prompts": 4,
            "gens": 4,
            "steps": 2,
            "lr": 1e-3,
            "hard_size": 8,
            "hard_pool": ["hard", "medium"],  # a tiny model's tags are mostly easy or unsolved
            "eval_n": 8,
            "batch": 64,
        }
    return {
        "per_level": args.per_level,
        "shape": {},
        "sft_chunk": 100,
        "sft_batch": 128,
        "sft_lr": 1e-3,
        "sft_chunks": 12,
        "target": (0.2, 0.6),
        "k": 8,
        "prompts": args.prompts,
        "gens": args.gens,
        "steps": args.steps,
        "lr": args.lr,
        "hard_size": None,
        "hard_pool": ["hard"],
        "eval_n": 8,
        "eval_tasks": args.eval_tasks,
        "tag_tasks": args.tag_tasks,
        "batch": 256,
    }


def run(store: Any, spec: Any, cfg: dict[str, Any], name: str, times: dict[str, float]) -> dict[str, Any]:
    """Run one trajkit stage (validated config, manifest, resume) and record its wall time."""
    from trajkit.runner import run_stage

    t0 = time.time()
    manifest = run_stage(store, spec, spec.config.model_validate(cfg), name=name, quiet=True)
    times[name] = time.time() - t0
    return manifest


def heldout_rows(store: Any, limit: int) -> list[dict[str, Any]]:
    """Held-out tasks as prompt/answer rows for ``heldout_pass1``."""
    split = {r["task_id"]: r["split"] for r in store.rows("splits")}
    tasks = sorted(
        (t for t in store.rows("tasks") if split.get(t["task_id"]) == "held_out"), key=lambda t: t["task_id"]
    )
    return [
        {"prompt": [{"role": "user", "content": t["question"]}], "answer": json.loads(t["verifier"]["spec"])["answer"]}
        for t in tasks[:limit]
    ]


def warm_start(store: Any, base: Path, s: dict[str, Any], times: dict[str, float]) -> dict[str, Any]:
    """``train.sft`` in chunks from ``base`` until held-out pass@1 is in the target range; the last model's dir."""
    import torch

    from trajkit.stages import get_stage
    from trajkit.train.weights import load_model, load_tokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    held = heldout_rows(store, 256)
    model, history = str(base), []
    for i in range(1, s["sft_chunks"] + 1):
        sft = {
            "max_steps": s["sft_chunk"],
            "per_device_train_batch_size": s["sft_batch"],
            "learning_rate": s["sft_lr"],
            "lr_scheduler_type": "constant",
            "max_length": None,
            "seed": i,
            "logging_steps": 10,
        }
        run(store, get_stage("train.sft"), {"model": model, "sft": sft}, f"sft-{i}", times)
        model = str(store.root / "models" / f"sft-{i}")
        pass1 = heldout_pass1(load_model(model).to(device), load_tokenizer(model), held, max_new_tokens=MAX_TOKENS)
        history.append((i * s["sft_chunk"], pass1))
        print(f"warm start: {i * s['sft_chunk']} SFT steps, held-out pass@1 {pass1:.3f}", flush=True)
        if pass1 >= s["target"][0]:
            break
    inside = s["target"][0] <= history[-1][1] <= s["target"][1]
    if not inside:  # reported, not raised: a GPU command's minutes are too dear to throw the rest away
        print(f"warm start: held-out pass@1 {history[-1][1]:.3f} is outside the target {s['target']}", flush=True)
    return {"model": model, "steps": history[-1][0], "pass1": history[-1][1], "history": history, "inside": inside}


def arm_files(run_dir: Path, warm: str, s: dict[str, Any], seed: int) -> dict[str, Path]:
    """One curriculum file per arm; every arm sees steps x prompts x gens completions in all."""
    import yaml

    g, p, steps = s["gens"], s["prompts"], s["steps"]
    grpo = {
        "per_device_train_batch_size": p * g,
        "gradient_accumulation_steps": 1,
        "max_completion_length": MAX_TOKENS,
        "temperature": 1.0,
        "learning_rate": s["lr"],
        "seed": seed,
        "logging_steps": 1,
    }
    defaults = {"grpo": grpo, "rewards": [{"name": "correctness"}], "conciseness": {"alpha": 0.0}, "tools": False}
    defaults["compiled_generation"] = False  # 12-token completions of a 4M model: compiling costs more than it saves
    hard = {"data": {"stage": "hard"}}  # rollouts per prompt: the curriculum's hard_rollouts (2G)
    broad = {"split": "train", "difficulty": ["hard", "medium", "easy"]}  # DRIVE's broad stage: no trivial, no unsolved
    arms = {
        "a": [
            {"name": f"a-s{seed}", "data": {"split": "train"}, "steps": steps, "grpo": {**grpo, "num_generations": g}}
        ],
        "b": [
            {"name": f"b-broad-s{seed}", "data": broad, "steps": steps // 2, "grpo": {**grpo, "num_generations": g}},
            {"name": f"b-hard-s{seed}", **hard, "steps": steps - steps // 2},
        ],
        "c": [{"name": f"c-s{seed}", **hard, "steps": steps}],
    }
    out = {}
    for arm, stages in arms.items():
        path = run_dir / f"curriculum-{arm}-s{seed}.yaml"
        path.write_text(yaml.safe_dump({"model": warm, "defaults": defaults, "stages": stages}))
        out[arm] = path
    return out


def batch_size(grpo: dict[str, Any]) -> int:
    """Completions per optimizer step of a GRPO stage (one process)."""
    return grpo["per_device_train_batch_size"] * grpo["gradient_accumulation_steps"]


def arm_metrics(store: Any, stages: list[str]) -> dict[str, Any]:
    """Per-step reward and pass rate of an arm's stages in order, zero-variance share, completion length."""
    rows = sorted(
        (r for r in store.rows("train_metrics") if r["stage"] in stages),
        key=lambda r: (stages.index(r["stage"]), r["step"]),
    )

    def mean(key: str) -> float | None:
        vals = [r[key] for r in rows if r[key] is not None]
        return sum(vals) / len(vals) if vals else None

    return {
        "reward": [r["reward_mean"] for r in rows],
        "pass_rate": [r["pass_rate"] for r in rows],
        "zero_variance": mean("zero_variance_groups"),
        "completion_length": mean("completion_length"),
    }


def bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every stage in one run directory: the warm start and tags once, then per seed the three arms and
    their evaluation. ``results.json`` (one entry per seed) is rewritten after each phase, so a command cut
    short by its time limit still brings back every seed that finished."""
    from trajkit.models.tiny import make_tiny_model
    from trajkit.stages import get_stage
    from trajkit.store import Store

    s = settings(args)
    run_dir = args.run_dir or args.out / "run"
    store = Store(run_dir, create=True)
    times: dict[str, float] = {}
    t_all = time.time()
    shared: dict[str, Any] = {"settings": s, "stage_s": times}
    results: list[dict[str, Any]] = []

    def save() -> None:
        shared["total_s"] = time.time() - t_all
        out = [{**shared, **r} for r in results] or [shared]
        (args.out / "results.json").write_text(json.dumps(out, indent=1))

    source = {"per_level": s["per_level"], "seed": 0}
    imp = {"source_fn": "bench.curriculum:task_records", "source_params": source, "source": "addition"}
    imp |= {"fields": {"id": "id", "question": "question", "answer": "answer", "path": "verifier"}}
    run(store, get_stage("curate.import"), {**imp, "verifier": "custom", "metadata": ["level"]}, "import", times)
    run(store, get_stage("curate.split"), {"held_out": 0.2}, "split", times)
    run(store, REFERENCE, {}, "reference", times)
    base = run_dir / "models" / "base"
    make_tiny_model(base, seed=0, **{**LEARNING_SHAPE, **s["shape"]})
    shared["warm_start"] = warm = warm_start(store, base, s, times)
    save()
    model = {"backend": "transformers", "max_batch_size": s["batch"], "cache": False}  # ~100k fresh samples
    sampling = {"temperature": 1.0, "max_tokens": MAX_TOKENS, "concurrency": s["batch"]}
    passk = {"model": {**model, "model": warm["model"]}, "k": s["k"], "ks": [1, s["k"]], "seed": 0, **sampling}
    passk["limit"] = s["tag_tasks"]
    shared["tags"] = run(store, get_stage("curate.passk"), passk, "passk", times)["summary"]["difficulty"]
    cur = {"hard_difficulties": s["hard_pool"], "broad_difficulties": ["hard", "medium", "easy"]}
    cur |= {"broad_rollouts": s["gens"], "hard_rollouts": 2 * s["gens"], "hard_size": s["hard_size"]}
    shared["curriculum"] = run(store, get_stage("curate.curriculum"), cur, "curriculum", times)["summary"]["stages"]
    shared["tags_by_level"] = by_level(store, "passk")
    save()
    for seed in args.seeds:
        results.append(one_seed(store, run_dir, s, seed, warm["model"], model, sampling, times))
        save()
    return [{**shared, **r} for r in results]


def one_seed(
    store: Any, run_dir: Path, s: dict, seed: int, warm: str, model: dict, sampling: dict, times: dict
) -> dict[str, Any]:
    """The three arms of one GRPO seed, then ``eval.passk`` of the warm start and the arms on fresh samples."""
    from trajkit.errors import UserError
    from trajkit.stages import get_stage
    from trajkit.train.curriculum import run_curriculum

    arms: dict[str, Any] = {}
    for arm, path in arm_files(run_dir, warm, s, seed).items():
        t0 = time.time()
        try:
            manifests = run_curriculum(path, run_dir)
        except UserError as e:  # e.g. no task tagged hard: the arm cannot run; the others still do
            arms[arm] = {"error": str(e)}
            print(f"seed {seed} arm {arm}: not run: {e}", flush=True)
            continue
        names = [m["stage"] for m in manifests]
        completions = sum(m["summary"]["steps"] * batch_size(m["summary"]["grpo"]) for m in manifests)
        arms[arm] = {"stages": names, "gpu_s": time.time() - t0, "completions": completions}
        arms[arm] |= arm_metrics(store, names) | {"model": str(run_dir / "models" / names[-1])}
        print(f"seed {seed} arm {arm}: {', '.join(names)} in {time.time() - t0:.0f}s", flush=True)
    ran = [a for a in ARMS if "model" in arms[a]]
    models = [{**model, "model": warm}] + [{**model, "model": arms[a]["model"]} for a in ran]
    ev = {"models": models, "split": "held_out", "n": s["eval_n"], "ks": [1, s["eval_n"]], "seed": 1, **sampling}
    ev["limit"] = s["eval_tasks"]
    report = run(store, get_stage("eval.passk"), ev, f"eval-s{seed}", times)["summary"]["report"]
    names = {warm: "warm start"} | {arms[a]["model"]: a for a in ran}
    levels = {names[m]: v for m, v in by_level(store, "eval_passk", f"eval-s{seed}").items()}
    return {
        "seed": seed,
        "arms": arms,
        "eval": [{**r, "model": names[r["model"]]} for r in report],
        "eval_by_level": levels,
    }


def by_level(store: Any, table: str, stage: str | None = None) -> dict[str, dict[int, float]]:
    """Mean pass@1 (correct / samples) per model and task level (carries), from ``passk`` or ``eval_passk``."""
    level = {t["task_id"]: json.loads(t["metadata"])["level"] for t in store.rows("tasks")}
    sums: dict[str, dict[int, list[float]]] = {}
    for r in store.rows(table, stage=stage):
        model = r["model"] if table == "eval_passk" else "tagging"
        if r["samples"]:
            sums.setdefault(model, {}).setdefault(level[r["task_id"]], []).append(r["correct"] / r["samples"])
    return {m: {lv: sum(v) / len(v) for lv, v in sorted(per.items())} for m, per in sums.items()}


def table(results: list[dict[str, Any]]) -> str:
    """Held-out pass@1 / pass@8 per bucket per arm (mean over seeds, spread in brackets), plus arm metrics."""
    k = results[0]["settings"]["eval_n"]
    rows = ["warm start", *ARMS]
    seen = {r["difficulty"] for res in results for r in res["eval"]}
    buckets = [b for b in BUCKETS if b in seen]

    def cell(model: str, bucket: str, key: str) -> str:
        vals = [r[key] for res in results for r in res["eval"] if r["model"] == model and r["difficulty"] == bucket]
        vals = [v for v in vals if v is not None]
        if not vals:
            return "-"
        spread = f" ({max(vals) - min(vals):.3f})" if len(vals) > 1 else ""
        return f"{sum(vals) / len(vals):.3f}{spread}"

    def tasks(bucket: str) -> str:
        counts = {r["tasks"] for res in results for r in res["eval"] if r["difficulty"] == bucket}
        return "/".join(map(str, sorted(counts)))

    seeds = ",".join(str(r["seed"]) for r in results)
    lines = [f"held-out pass@1 and pass@{k} per difficulty bucket (tagged by the warm start), seeds {seeds}:"]
    lines.append("mean over seeds, (max - min) in brackets; bucket sizes per seed in the header")
    head = f"{'':24}" + "".join(f"{b} [{tasks(b)}]".rjust(32) for b in buckets)
    lines.append(head)
    for m in rows:
        label = "warm start" if m == "warm start" else ARM_NAMES[m]
        for key in ("pass@1", f"pass@{k}"):
            lines.append(f"{label + ' ' + key:24}" + "".join(cell(m, b, key).rjust(32) for b in buckets))
    lines.append("")
    lines.append("held-out pass@1 per level (carries; levels 0-1 are the easier half, the warm start's SFT data):")
    for m in rows:
        per = [res.get("eval_by_level", {}).get(m, {}) for res in results]
        label = "warm start" if m == "warm start" else ARM_NAMES[m]
        cells = []
        for lv in LEVELS:
            vals = [p[str(lv)] if str(lv) in p else p.get(lv) for p in per]
            vals = [v for v in vals if v is not None]
            cells.append(f"{lv}: {sum(vals) / len(vals):.3f}" if vals else f"{lv}: -")
        lines.append(f"{label:24}" + "".join(c.rjust(14) for c in cells))
    lines.append("")
    lines.append(f"{'arm':24}{'stages':>34}{'zero-var groups':>18}{'compl. len':>12}{'GPU s':>10}{'completions':>13}")
    for a in ARMS:
        per = [res["arms"][a] for res in results if "model" in res["arms"][a]]
        if not per:
            lines.append(f"{ARM_NAMES[a]:24} not run: {results[0]['arms'][a].get('error')}")
            continue
        zv = sum(p["zero_variance"] or 0 for p in per) / len(per)
        cl = sum(p["completion_length"] or 0 for p in per) / len(per)
        gpu = sum(p["gpu_s"] for p in per) / len(per)
        done = "/".join(str(n) for n in sorted({p["completions"] for p in per}))
        lines.append(f"{ARM_NAMES[a]:24}{'+'.join(per[0]['stages']):>34}{zv:>18.3f}{cl:>12.2f}{gpu:>10.0f}{done:>13}")
    for res in results:
        w = res["warm_start"]
        lines.append(
            f"seed {res['seed']}: warm start {w['steps']} SFT steps, held-out pass@1 {w['pass1']:.3f} (own check); "
            f"tags {res['tags']}; curriculum {res['curriculum']}; all stages {res['total_s']:.0f}s"
        )
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], path: Path) -> None:
    """Reward per step per arm (each seed a line), the hard stage's start marked for arm (b)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    colors = {"a": "tab:blue", "b": "tab:orange", "c": "tab:green"}
    for res in results:
        for a in ARMS:
            reward = res["arms"][a].get("reward", [])
            ax.plot(
                range(1, len(reward) + 1), reward, color=colors[a], alpha=0.8, label=f"{ARM_NAMES[a]} s{res['seed']}"
            )
    steps = results[0]["settings"]["steps"]
    ax.axvline(steps // 2 + 0.5, color=colors["b"], linestyle=":", linewidth=1)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("reward (pass rate of the step's completions)")
    ax.set_title("Curriculum ablation: reward per step per arm (equal completions per step)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(results: list[dict[str, Any]], out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    text = table(results)
    (out / "table.txt").write_text(text + "\n")
    plot(results, out / "curriculum.png")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="the H200 sizes (one seed per command)")
    parser.add_argument("--tiny", action="store_true", help="a tiny model on CPU, a handful of steps")
    parser.add_argument("--report", type=Path, nargs="+", help="merge these results dirs (their results.json)")
    parser.add_argument("--seeds", default="0,1", help="GRPO seeds of every arm, one after the other")
    parser.add_argument("--per-level", type=int, default=3000, help="tasks per level (carries 0..3)")
    parser.add_argument("--tag-tasks", type=int, default=6000, help="tasks tagged by pass@8 (first N by id)")
    parser.add_argument("--prompts", type=int, default=64, help="prompts per GRPO step (hard stages: half)")
    parser.add_argument("--gens", type=int, default=8, help="generations per prompt (hard stages: twice)")
    parser.add_argument("--steps", type=int, default=100, help="GRPO steps per arm")
    parser.add_argument("--lr", type=float, default=3e-4, help="GRPO learning rate")
    parser.add_argument("--eval-tasks", type=int, default=800, help="held-out tasks evaluated (first N by id)")
    parser.add_argument("--out", type=Path, default=Path("curriculum-bench"), help="results.json, table.txt, PNG")
    parser.add_argument("--run-dir", type=Path, help="the trajkit run directory (default OUT/run)")
    args = parser.parse_args()
    args.seeds = [int(x) for x in args.seeds.split(",")]
    if args.report:
        results = [r for d in args.report for r in json.loads((d / "results.json").read_text()) if "arms" in r]
        print(write_report(results, args.out))
        return
    import torch

    if not (args.gpu or args.tiny) or (args.gpu and not torch.cuda.is_available()):
        print("skipped: curriculum needs --gpu on a GPU machine (--tiny runs a CPU smoke version)")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    print(write_report(bench(args), args.out))


if __name__ == "__main__":
    main()
