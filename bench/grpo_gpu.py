"""GRPO throughput on one GPU: TRL's defaults against trajkit's settings, side by side in one run.

    python bench/grpo_gpu.py                 # 0.5B-shaped random Qwen2 on the GPU (one H200)
    python bench/grpo_gpu.py --tiny          # a tiny model on CPU, to check the script runs

Every variant trains the same random-weight model on the same synthetic
verifiable task (add two numbers of 1 to 4 digits; the reward checks the sum) with the
same prompts per step, ``num_generations``, ``max_completion_length`` and
sampling parameters. Variants:

* ``trl-defaults`` — TRL's GRPOConfig defaults (64 completions per step as
  8 micro-batches of 8, gradient checkpointing, fp32 weights, bf16 autocast);
* ``batch-shape``  — trajkit's batch shape only (``trajkit.train.speed.batch_shape``);
* ``kernels``      — trajkit's kernels only (bf16 weights, TF32, static cache + compiled decode);
* ``trajkit``      — both.

Each variant runs in its own process (a clean CUDA context and compile cache).
Per optimizer step: wall time split into generation and the rest (rewards,
log-probs, backward, optimizer), completion tokens per second, and model FLOPs
utilization (2·N FLOPs per generated token, 6·N per trained token, N the
matmul parameters, against the GPU's dense bf16 peak).
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

PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12}
QWEN2_VOCAB = 151_936
VARIANTS = ("trl-defaults", "batch-shape", "kernels", "trajkit")


def build_model(out: Path, tiny: bool) -> Path:
    """The benchmark model: 0.5B-shaped Qwen2 (Qwen2.5-0.5B's shape and vocabulary), or a tiny one."""
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


def dataset(n: int, seed: int = 0):
    import random

    from datasets import Dataset

    rng = random.Random(seed)
    rows = []
    for _ in range(n):  # 1- to 4-digit numbers: prompts of several lengths, so batches are left-padded
        a, b = (rng.randint(1, 10 ** rng.randint(1, 4) - 1) for _ in range(2))
        rows.append(
            {
                "prompt": [{"role": "user", "content": f"What is {a} plus {b}? Answer with the number."}],
                "answer": str(a + b),
            }
        )
    return Dataset.from_list(rows)


def sum_reward(prompts, completions, answer, **_):
    """The synthetic task's verifier: 1.0 when the completion contains the sum."""
    return [1.0 if a in c[0]["content"] else 0.0 for c, a in zip(completions, answer)]


def run_variant(name: str, model_dir: Path, args: argparse.Namespace) -> dict:
    import torch
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from trajkit.train.grpo import TRAJKIT_GRPO
    from trajkit.train.speed import KERNELS, batch_shape, compile_generation
    from trajkit.train.weights import load_model, load_tokenizer

    cuda = torch.cuda.is_available()
    batch = name in ("batch-shape", "trajkit")
    kernels = name in ("kernels", "trajkit")
    common = {
        "output_dir": tempfile.mkdtemp(prefix=f"grpo-bench-{name}-"),
        "num_generations": args.num_generations,
        "max_completion_length": args.max_completion_length,
        "temperature": 1.0,
        "top_p": 1.0,
        "report_to": "none",
        "save_strategy": "no",
        "logging_steps": 1,
        "seed": 0,
        "max_steps": args.warmup + args.steps,
        # 64 completions per step, as TRL's defaults give them: 8 micro-batches of 8
        "per_device_train_batch_size": 8,
        "gradient_accumulation_steps": args.prompts_per_step * args.num_generations // 8,
    }
    if not cuda:
        common.update(bf16=False, use_cpu=True)
    if name != "trl-defaults":
        common.update(TRAJKIT_GRPO)
    if batch:
        common.update(batch_shape(args.prompts_per_step * args.num_generations, args.steps_per_generation))
    if kernels and cuda:
        common.update(KERNELS)
    config = GRPOConfig(**common)
    tok = load_tokenizer(str(model_dir))
    model = load_model(str(model_dir), "bfloat16" if kernels and cuda else None)
    n_prompts = args.prompts_per_step * (args.warmup + args.steps) * 2
    trainer = GRPOTrainer(
        model=model, reward_funcs=sum_reward, args=config, train_dataset=dataset(n_prompts), processing_class=tok
    )
    if kernels:
        compile_generation(trainer)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    timing = {"gen_s": [], "gen_tokens": [], "steps": []}
    generate = trainer._generate_single_turn

    def timed_generate(*a, **kw):
        sync()
        t0 = time.perf_counter()
        ids, logprobs = generate(*a, **kw)
        sync()
        timing["gen_s"].append((trainer.state.global_step, time.perf_counter() - t0))
        timing["gen_tokens"].append((trainer.state.global_step, sum(len(x) for x in ids)))
        return ids, logprobs

    trainer._generate_single_turn = timed_generate

    class StepTimer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            sync()
            self.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            sync()
            timing["steps"].append(time.perf_counter() - self.t0)

    trainer.add_callback(StepTimer())
    trainer.train()
    measured = range(args.warmup, args.warmup + args.steps)  # steps are 0-based in global_step at generate time
    step_s = sum(timing["steps"][i] for i in measured) / args.steps
    gen_s = sum(s for step, s in timing["gen_s"] if step in measured) / args.steps
    tokens = sum(n for step, n in timing["gen_tokens"] if step in measured) / args.steps
    n_matmul = sum(p.numel() for n, p in model.named_parameters() if "embed_tokens" not in n and "norm" not in n)
    if model.config.tie_word_embeddings:
        n_matmul += model.get_input_embeddings().weight.numel()  # the LM head's matmul still runs
    sample = dataset(64)["prompt"]
    prompt_len = sum(
        len(tok.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"])
        for p in sample
    ) / len(sample)
    prompt_tokens = prompt_len * args.prompts_per_step * args.num_generations
    flops = 2 * n_matmul * tokens + 6 * n_matmul * (tokens + prompt_tokens)
    gpu = torch.cuda.get_device_name(0) if cuda else "cpu"
    peak = next((v for k, v in PEAK_BF16.items() if k in gpu), None)
    return {
        "variant": name,
        "device": gpu,
        "step_s": step_s,
        "gen_s": gen_s,
        "other_s": step_s - gen_s,
        "gen_share": gen_s / step_s,
        "tokens_per_s": tokens / step_s,
        "completion_tokens_per_step": tokens,
        "mfu": flops / step_s / peak if peak else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a tiny model (CPU smoke run)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--prompts-per-step", type=int, default=8)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--max-completion-length", type=int, default=256)
    parser.add_argument("--steps-per-generation", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=4, help="steps excluded from timing (compilation)")
    parser.add_argument("--steps", type=int, default=8, help="timed steps (a multiple of --steps-per-generation)")
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument(
        "--json", type=Path, help="also append each variant's result to this JSON-lines file as it finishes"
    )
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tiny and not args.variant:
        args.max_completion_length = min(args.max_completion_length, 16)
        args.prompts_per_step, args.num_generations = min(args.prompts_per_step, 2), min(args.num_generations, 4)
        args.warmup, args.steps, args.steps_per_generation = (
            min(args.warmup, 1),
            min(args.steps, 2),
            min(args.steps_per_generation, 2),
        )
    model_dir = args.model_dir or Path(tempfile.gettempdir()) / (
        "grpo-bench-tiny" if args.tiny else "grpo-bench-qwen2-0.5b"
    )
    if args.variant:  # a child process: one variant, result as JSON
        args.result.write_text(json.dumps(run_variant(args.variant, model_dir, args)))
        return
    build_model(model_dir, args.tiny)
    results = []
    for name in args.variants.split(","):
        out = Path(tempfile.mkstemp(suffix=".json")[1])
        cmd = [sys.executable, __file__, "--variant", name, "--result", str(out), "--model-dir", str(model_dir)]
        for flag in (
            "prompts_per_step",
            "num_generations",
            "max_completion_length",
            "steps_per_generation",
            "warmup",
            "steps",
        ):
            cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
        t0 = time.time()
        done = subprocess.run(
            cmd, check=False, env={**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1"}, capture_output=True, text=True
        )
        if done.returncode or not out.read_text():
            print(f"{name}: failed after {time.time() - t0:.0f}s\n{done.stderr[-3000:]}", file=sys.stderr)
            continue
        results.append(json.loads(out.read_text()))
        print(f"{name}: done in {time.time() - t0:.0f}s: {out.read_text()}", flush=True)
        if args.json:
            with args.json.open("a") as f:
                f.write(out.read_text() + "\n")
    report(results, args)


def report(results: list[dict], args: argparse.Namespace) -> None:
    if not results:
        sys.exit("no variant finished")
    base = next((r for r in results if r["variant"] == "trl-defaults"), results[0])
    print(
        f"GRPO, {results[0]['device']}: {args.prompts_per_step} prompts x {args.num_generations} generations x "
        f"{args.max_completion_length} tokens per step; {args.steps} timed steps after {args.warmup} warm-up"
    )
    header = f"{'variant':<14}{'step s':>9}{'gen s':>9}{'other s':>9}{'gen %':>7}{'tok/s':>10}{'MFU %':>7}{'vs TRL':>8}"
    print(header)
    print("-" * len(header))
    for r in results:
        mfu = f"{100 * r['mfu']:.1f}" if r["mfu"] is not None else "-"
        print(
            f"{r['variant']:<14}{r['step_s']:>9.2f}{r['gen_s']:>9.2f}{r['other_s']:>9.2f}{100 * r['gen_share']:>7.0f}"
            f"{r['tokens_per_s']:>10.0f}{mfu:>7}{r['tokens_per_s'] / base['tokens_per_s']:>7.2f}x"
        )
    by = {r["variant"]: r for r in results}
    if {"trl-defaults", "batch-shape", "kernels", "trajkit"} <= set(by):
        t = by["trl-defaults"]["tokens_per_s"]
        print(
            f"gain from batch shape {by['batch-shape']['tokens_per_s'] / t:.2f}x, from kernels "
            f"{by['kernels']['tokens_per_s'] / t:.2f}x, together {by['trajkit']['tokens_per_s'] / t:.2f}x (goal >= 2x)"
        )


if __name__ == "__main__":
    main()
