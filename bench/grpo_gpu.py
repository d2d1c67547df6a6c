"""GRPO on one GPU: TRL's defaults against trajkit's settings, side by side in one run.

    python bench/grpo_gpu.py                 # throughput: 0.5B-shaped random Qwen2 (one H200)
    python bench/grpo_gpu.py --learning      # learning parity from an SFT warm start, two seeds (one H200)
    python bench/grpo_gpu.py --updates       # one step at lr 1e-6: how much of fp32's update each variant keeps
    python bench/grpo_gpu.py --tiny [...]    # a tiny model on CPU, to check the script runs

Every variant trains the same model on the same synthetic verifiable task (add
two numbers; the reward checks the sum, ``bench/grpo_common.py``) with the same
prompts per step, ``num_generations``, ``max_completion_length`` and sampling.
Variants:

* ``trl-defaults`` — TRL defaults, gradient accumulation set to give 64
  completions per step (``per_device_train_batch_size`` 8, so 8 micro-batches;
  TRL's own default is 1 micro-batch), gradient checkpointing, fp32 weights,
  bf16 autocast;
* ``batch-shape``  — trajkit's batch shape only (``generation_steps``);
* ``kernels``      — trajkit's kernels only (TF32, compiled decode from a bf16 copy);
* ``trajkit``      — both: the ``GRPOConfig`` that ``trajkit train grpo`` builds
  (``trajkit.train.grpo.grpo_args``) and the stage's compiled generation;
* ``pure-bf16``    — ``trajkit`` with the weights and optimizer in bf16 (the stage
  before fp32 master weights): a control for what that loses.

Each variant runs in its own process (a clean CUDA context and compile cache).
Throughput reports per optimizer step: wall time split into generation and the
rest, completion tokens per second, model FLOPs utilization (2·N FLOPs per
generated token, 6·N per trained token, N the matmul parameters, against the
GPU's dense bf16 peak), how stale the trained samples are (optimizer steps
since they were generated) and the fraction of tokens the importance-ratio
clip cut. Learning reports reward and held-out pass@1 against step and wall
time (held-out evaluation excluded), a table and a PNG.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.grpo_common import addition_rows, encode_prompts, heldout_pass1, sum_reward

PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12}
QWEN2_VOCAB = 151_936
VARIANTS = ("trl-defaults", "batch-shape", "kernels", "trajkit")
LEARNING_VARIANTS = ("trl-defaults", "trajkit", "pure-bf16")
SFT_ROWS = 20000  # the warm start's training prompts; held-out prompts are pairs no training prompt has
BASELINE = "TRL defaults, gradient accumulation set to give {} completions per step"


def build_model(out: Path, tiny: bool) -> Path:
    """The throughput model: 0.5B-shaped Qwen2 (Qwen2.5-0.5B's shape and vocabulary), or a tiny one."""
    from trajkit.models.tiny import QWEN2_0_5B_SHAPE, TINY_SHAPE, make_tiny_model

    if (out / "config.json").is_file():
        return out
    if tiny:
        return make_tiny_model(out, architecture="qwen2", **{k: v for k, v in TINY_SHAPE.items() if k != "head_dim"})
    make_tiny_model(out, **QWEN2_0_5B_SHAPE)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(out)
    model.resize_token_embeddings(QWEN2_VOCAB, mean_resizing=False)  # ids past the tokenizer decode to nothing
    model.save_pretrained(out)
    return out


def variant_config(name: str, args: argparse.Namespace, steps: int, seed: int, lr: float | None) -> tuple:
    """(GRPOConfig, weights dtype, compiled generation?) of a variant; trajkit's come from the stage's grpo_args."""
    import torch
    from trl import GRPOConfig

    from trajkit.train.grpo import GRPOStageConfig, grpo_args

    cuda = torch.cuda.is_available()
    out = tempfile.mkdtemp(prefix=f"grpo-bench-{name}-")
    sampling = {
        "num_generations": args.num_generations,
        "max_completion_length": args.max_completion_length,
        "temperature": 1.0,
        "top_p": 1.0,
        "seed": seed,
        "per_device_train_batch_size": 8,
        "gradient_accumulation_steps": args.prompts_per_step * args.num_generations // 8,
        **({"learning_rate": lr} if lr else {}),
        **({} if cuda else {"use_cpu": True}),
    }
    if name == "trl-defaults":
        extra = {} if cuda else {"bf16": False}
        plain = {"report_to": "none", "save_strategy": "no", "logging_steps": 1, "max_steps": steps}
        return GRPOConfig(output_dir=out, **sampling, **plain, **extra), None, False
    batch = name in ("batch-shape", "trajkit", "pure-bf16")
    stage = GRPOStageConfig(
        model="bench", steps=steps, grpo=sampling, generation_steps=args.steps_per_generation if batch else None
    )
    config = grpo_args(stage, out, [1.0], None)
    if name == "batch-shape":
        config.tf32 = False  # TRL's precision: fp32 weights under bf16 autocast, no TF32, no compiled decode
        return config, None, False
    return config, "bfloat16" if name == "pure-bf16" else None, True


def train_variant(name: str, model_dir: Path, args: argparse.Namespace, steps: int, seed: int, heldout=None) -> dict:
    """Train one variant; per step: wall time, generation time and tokens, reward, clip fraction, staleness."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from trajkit.train.speed import compile_generation
    from trajkit.train.weights import load_model, load_tokenizer

    cuda = torch.cuda.is_available()
    config, dtype, compiled = variant_config(name, args, steps, seed, args.lr)
    tok = load_tokenizer(str(model_dir))
    model = load_model(str(model_dir), dtype)
    rows = addition_rows(args.prompts_per_step * steps * 2, seed=100 + seed, max_digits=args.digits, split="train")
    trainer = GRPOTrainer(
        model=model, reward_funcs=sum_reward, args=config, train_dataset=Dataset.from_list(rows), processing_class=tok
    )
    if compiled:
        compile_generation(trainer, static_cache=cuda)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    log = {"gen": [], "step_s": [], "pass1": []}
    generate = trainer._generate_single_turn

    def timed_generate(*a, **kw):
        sync()
        t0 = time.perf_counter()
        ids, logprobs = generate(*a, **kw)
        sync()
        log["gen"].append((trainer.state.global_step, time.perf_counter() - t0, sum(len(x) for x in ids)))
        return ids, logprobs

    trainer._generate_single_turn = timed_generate

    class StepTimer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            sync()
            self.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            sync()
            log["step_s"].append(time.perf_counter() - self.t0)
            if heldout and (state.global_step % args.eval_every == 0 or state.global_step == steps):
                log["pass1"].append((state.global_step, heldout_pass1(model, tok, heldout, args.max_completion_length)))

    trainer.add_callback(StepTimer())
    if heldout:
        log["pass1"].append((0, heldout_pass1(model, tok, heldout, args.max_completion_length)))
    trainer.train()
    logged = trainer.state.log_history  # reward only on steps that generated; clip ratio on every step
    gen_steps = sorted({s for s, _, _ in log["gen"]})
    stale = [k - max(g for g in gen_steps if g <= k) for k in range(steps)]
    return {
        "variant": name,
        "seed": seed,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "step_s": log["step_s"],
        "gen": log["gen"],
        "reward": [(h["step"], h["reward"]) for h in logged if "reward" in h],
        "clip_fraction": [(h["step"], h["clip_ratio/region_mean"]) for h in logged if "clip_ratio/region_mean" in h],
        "staleness": stale,
        "pass1": log["pass1"],
        "n_matmul": matmul_params(model),
    }


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def matmul_params(model) -> int:
    n = sum(p.numel() for n, p in model.named_parameters() if "embed_tokens" not in n and "norm" not in n)
    if model.config.tie_word_embeddings:
        n += model.get_input_embeddings().weight.numel()  # the LM head's matmul still runs
    return n


def throughput(r: dict, args: argparse.Namespace, prompt_len: float) -> dict:
    """Timed steps only (after --warmup): seconds per step, generation share, tokens/s, MFU."""
    measured = range(args.warmup, args.warmup + args.steps)
    step_s = sum(r["step_s"][i] for i in measured) / args.steps
    gen_s = sum(s for step, s, _ in r["gen"] if step in measured) / args.steps
    tokens = sum(n for step, _, n in r["gen"] if step in measured) / args.steps
    prompt_tokens = prompt_len * args.prompts_per_step * args.num_generations
    flops = 2 * r["n_matmul"] * tokens + 6 * r["n_matmul"] * (tokens + prompt_tokens)
    peak = next((v for k, v in PEAK_BF16.items() if k in r["device"]), None)
    return {
        "step_s": step_s,
        "gen_s": gen_s,
        "tokens_per_s": tokens / step_s,
        "mfu": flops / step_s / peak if peak else None,
        "staleness": sum(r["staleness"][i] for i in measured) / args.steps,
        "clip_fraction": mean([c for step, c in r["clip_fraction"] if step - 1 in measured]),
    }


def run_children(jobs: list[tuple[str, int]], model_dir: Path, args: argparse.Namespace, argv: list[str]) -> list:
    """Each (variant, seed) in its own process, ``--parallel`` at a time (the seeds of one variant together)."""
    results = []
    for i in range(0, len(jobs), args.parallel):
        group = []
        for name, seed in jobs[i : i + args.parallel]:
            out = Path(tempfile.mkstemp(suffix=".json")[1])
            cmd = [sys.executable, __file__, *argv, "--variant", name, "--seed", str(seed), "--result", str(out)]
            cmd += ["--model-dir", str(model_dir)]
            env = {**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1"}
            group.append(
                (name, seed, out, time.time(), subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True))
            )
        for name, seed, out, t0, proc in group:
            _, err = proc.communicate()
            if proc.returncode or not out.read_text():
                print(f"{name} seed {seed}: failed after {time.time() - t0:.0f}s\n{err[-3000:]}", file=sys.stderr)
                continue
            results.append(json.loads(out.read_text()))
            print(f"{name} seed {seed}: done in {time.time() - t0:.0f}s", flush=True)
            if args.json:
                with args.json.open("a") as f:
                    f.write(out.read_text() + "\n")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a tiny model (CPU smoke run)")
    parser.add_argument("--learning", action="store_true", help="learning parity from an SFT warm start")
    parser.add_argument("--updates", action="store_true", help="one step at lr 1e-6 against plain fp32")
    parser.add_argument(
        "--variants", default=None, help=f"default {','.join(VARIANTS)} ({','.join(LEARNING_VARIANTS)})"
    )
    parser.add_argument("--seeds", default="0,1", help="learning: the seeds of every variant")
    parser.add_argument("--lr", type=float, default=None, help="learning rate (default TRL's 1e-6; learning: 3e-5)")
    parser.add_argument("--prompts-per-step", type=int, default=8)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--max-completion-length", type=int, default=None, help="default 256 (learning: 12)")
    parser.add_argument("--steps-per-generation", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=4, help="steps excluded from timing (compilation)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps (default 8; learning: 64 GRPO steps)")
    parser.add_argument("--digits", type=int, default=None, help="digits of the added numbers (4; learning: 2)")
    parser.add_argument("--eval-every", type=int, default=8, help="learning: held-out pass@1 every N steps")
    parser.add_argument("--heldout", type=int, default=512, help="learning: held-out prompts")
    parser.add_argument("--parallel", type=int, default=1, help="processes at a time (learning: the seeds)")
    parser.add_argument("--out", type=Path, default=Path("grpo-learning"), help="learning: table and PNG go here")
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument("--json", type=Path, help="also append each run's result to this JSON-lines file")
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    import torch

    if not (args.tiny or args.updates or args.variant) and not torch.cuda.is_available():
        print("skipped: grpo_gpu needs a GPU (--tiny runs a CPU smoke version, --tiny --updates the update check)")
        return
    learning = args.learning
    args.lr = args.lr or (3e-5 if learning else None)
    args.max_completion_length = args.max_completion_length or (12 if learning else 256)
    args.steps = args.steps or (64 if learning else 8)
    args.digits = args.digits or (2 if learning else 4)
    if args.tiny and not args.variant:
        args.max_completion_length = min(args.max_completion_length, 16)
        args.prompts_per_step, args.num_generations = min(args.prompts_per_step, 2), min(args.num_generations, 4)
        args.warmup, args.steps, args.steps_per_generation = 1, min(args.steps, 4 if learning else 2), 2
        args.digits, args.heldout, args.eval_every = (1, 64, 2) if learning else (args.digits, 0, 0)
    if args.variant:  # a child process: one variant, result as JSON
        heldout = addition_rows(args.heldout, seed=1, max_digits=args.digits, split="heldout") if learning else None
        steps = args.steps if learning else args.warmup + args.steps
        result = train_variant(args.variant, args.model_dir, args, steps, args.seed, heldout)
        args.result.write_text(json.dumps(result))
        return
    if args.updates:
        return updates(args)
    if learning:
        return learn(args)
    model_dir = args.model_dir or Path(tempfile.gettempdir()) / (
        "grpo-bench-tiny" if args.tiny else "grpo-bench-qwen2-0.5b"
    )
    build_model(model_dir, args.tiny)
    names = (args.variants or ",".join(VARIANTS)).split(",")
    results = run_children([(n, 0) for n in names], model_dir, args, child_flags(args))
    report(results, args, model_dir)


def child_flags(args: argparse.Namespace) -> list[str]:
    flags = ["prompts_per_step", "num_generations", "max_completion_length", "steps_per_generation", "warmup"]
    flags += ["steps", "digits", "eval_every", "heldout"]
    argv = [x for f in flags for x in (f"--{f.replace('_', '-')}", str(getattr(args, f)))]
    return argv + (["--lr", str(args.lr)] if args.lr else []) + (["--learning"] if args.learning else [])


def updates(args: argparse.Namespace) -> None:
    """One GRPO step at lr 1e-6 on CPU: trajkit's GPU precision and the pure-bf16 control against plain fp32."""
    from bench.grpo_common import one_step_delta, update_parity
    from trajkit.train.speed import fast_settings

    model_dir = args.model_dir or Path(tempfile.gettempdir()) / "grpo-bench-tiny"
    build_model(model_dir, tiny=True)
    gpu = {k: v for k, v in fast_settings(cuda=True).items() if k != "tf32"}  # TF32 is a CUDA matmul mode
    fp32 = one_step_delta(model_dir, None, {"bf16": False})
    bf16 = update_parity(one_step_delta(model_dir, "bfloat16", gpu), fp32)
    changed, mean = update_parity(one_step_delta(model_dir, None, gpu), fp32)
    print(f"pure-bf16 control: {100 * bf16[0]:.1f}% of fp32's changed parameters, mean {bf16[1]:.3f} of fp32's")
    print(f"updates: {100 * changed:.1f}% of fp32's changed parameters, mean {mean:.3f} of fp32's")


def learn(args: argparse.Namespace) -> None:
    from bench.grpo_common import warm_start

    args.out.mkdir(parents=True, exist_ok=True)
    model_dir = args.model_dir or Path(tempfile.mkdtemp(prefix="grpo-learning-")) / "warm"
    t0 = time.time()
    shape = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2} if args.tiny else {}
    rows = addition_rows(SFT_ROWS, seed=0, max_digits=args.digits, split="train")
    heldout = addition_rows(args.heldout, seed=1, max_digits=args.digits, split="heldout")
    warm = warm_start(model_dir, rows, heldout[:256], batch=32 if args.tiny else 64, **shape)
    print(f"warm start: {warm['steps']} SFT steps, held-out pass@1 {warm['pass1']:.3f} in {time.time() - t0:.0f}s")
    names = (args.variants or ",".join(LEARNING_VARIANTS)).split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    results = run_children([(n, s) for n in names for s in seeds], model_dir, args, child_flags(args))
    (args.out / "results.json").write_text(json.dumps({"warm_start": warm, "runs": results}))
    learning_report(results, args, warm)


def learning_report(results: list[dict], args: argparse.Namespace, warm: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    print(
        f"GRPO learning, {results[0]['device']}: lr {args.lr}, {args.steps} steps of {args.prompts_per_step} prompts x "
        f"{args.num_generations} generations, {args.digits}-digit addition; warm start pass@1 {warm['pass1']:.3f}"
    )
    header = f"{'variant':<14}{'seed':>5}{'pass@1 0':>10}{'pass@1 N':>10}{'reward 1-8':>12}{'reward N-8..':>13}"
    header += f"{'wall s':>8}{'tok/s':>9}{'stale':>7}{'clip %':>8}"
    print(header)
    print("-" * len(header))
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    colors = {"trl-defaults": "tab:blue", "trajkit": "tab:green", "pure-bf16": "tab:red"}
    for r in results:
        wall = sum(r["step_s"])
        tokens = sum(n for _, _, n in r["gen"])
        reward = [v for _, v in r["reward"]]
        print(
            f"{r['variant']:<14}{r['seed']:>5}{r['pass1'][0][1]:>10.3f}{r['pass1'][-1][1]:>10.3f}"
            f"{mean([v for st, v in r['reward'] if st <= 8]):>12.3f}"
            f"{mean([v for st, v in r['reward'] if st > args.steps - 8]):>13.3f}{wall:>8.1f}"
            f"{tokens / wall:>9.0f}{mean(r['staleness']):>7.2f}{100 * mean([c for _, c in r['clip_fraction']]):>8.2f}"
        )
        style = {"color": colors.get(r["variant"]), "ls": "-" if r["seed"] == 0 else "--"}
        label = f"{r['variant']} seed {r['seed']}"
        axes[0].plot([step for step, _ in r["reward"]], reward, label=label, **style)
        steps, pass1 = zip(*r["pass1"])
        axes[1].plot(steps, pass1, marker="o", label=label, **style)
        cum = [0.0] + [sum(r["step_s"][:s]) for s in steps[1:]]
        axes[2].plot(cum, pass1, marker="o", label=label, **style)
    for ax, (x, y) in zip(
        axes, [("step", "reward"), ("step", "held-out pass@1"), ("wall s (training)", "held-out pass@1")]
    ):
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(
        f"GRPO learning parity (lr {args.lr}; baseline: {BASELINE.format(args.prompts_per_step * args.num_generations)})"
    )
    fig.tight_layout()
    png = args.out / "grpo_learning.png"
    fig.savefig(png, dpi=110)
    summary = {}
    for name in {r["variant"] for r in results}:
        finals = [r["pass1"][-1][1] for r in results if r["variant"] == name]
        tps = [sum(n for _, _, n in r["gen"]) / sum(r["step_s"]) for r in results if r["variant"] == name]
        summary[name] = (sum(finals) / len(finals), max(finals) - min(finals), sum(tps) / len(tps))
    for name, (final, spread, tps) in sorted(summary.items()):
        print(f"{name}: final held-out pass@1 mean {final:.3f}, seed spread {spread:.3f}, completion tok/s {tps:.0f}")
    if {"trl-defaults", "trajkit"} <= set(summary):
        base, ours = summary["trl-defaults"], summary["trajkit"]
        print(
            f"parity: trajkit {ours[0]:.3f} vs TRL defaults {base[0]:.3f} - spread {base[1]:.3f} -> "
            f"{'met' if ours[0] >= base[0] - base[1] else 'NOT met'}; TRL rise over warm start "
            f"{base[0] - warm['pass1']:+.3f}; tokens/s {ours[2] / base[2]:.1f}x"
        )
    print(f"plot: {png}")


def report(results: list[dict], args: argparse.Namespace, model_dir: Path) -> None:
    if not results:
        sys.exit("no variant finished")
    from trajkit.train.weights import load_tokenizer

    tok = load_tokenizer(str(model_dir))
    sample = addition_rows(64)
    prompt_len = sum(len(p) for p in encode_prompts(tok, sample)) / 64
    rows = {r["variant"]: throughput(r, args, prompt_len) for r in results}
    base = rows.get("trl-defaults") or next(iter(rows.values()))
    print(
        f"GRPO, {results[0]['device']}: {args.prompts_per_step} prompts x {args.num_generations} generations x "
        f"{args.max_completion_length} tokens per step; {args.steps} timed steps after {args.warmup} warm-up; "
        f"trl-defaults = {BASELINE.format(args.prompts_per_step * args.num_generations)}"
    )
    header = f"{'variant':<14}{'step s':>9}{'gen s':>9}{'gen %':>7}{'tok/s':>10}{'MFU %':>7}{'vs TRL':>8}"
    header += f"{'stale':>7}{'clip %':>8}"
    print(header)
    print("-" * len(header))
    for name, r in rows.items():
        mfu = f"{100 * r['mfu']:.1f}" if r["mfu"] is not None else "-"
        print(
            f"{name:<14}{r['step_s']:>9.2f}{r['gen_s']:>9.2f}{100 * r['gen_s'] / r['step_s']:>7.0f}"
            f"{r['tokens_per_s']:>10.0f}{mfu:>7}{r['tokens_per_s'] / base['tokens_per_s']:>7.2f}x"
            f"{r['staleness']:>7.2f}{100 * r['clip_fraction']:>8.2f}"
        )


if __name__ == "__main__":
    main()
