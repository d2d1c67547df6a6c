"""A two-stage GRPO curriculum through `trajkit train grpo` with the shipped FSDP2 accelerate config.

    python bench/grpo_fsdp.py --num-processes 1     # one GPU (the accelerate FSDP2 path)
    python bench/grpo_fsdp.py --num-processes 2     # two GPUs of one host, NCCL
    python bench/grpo_fsdp.py --tiny --cpu          # a smoke run on CPU (accelerate runs it as DDP)

It builds a random-weight Qwen2 (0.5B-shaped by default), a run directory with a
synthetic verifiable task (add two numbers; a custom verifier gives the share of
the sum's digits in the answer, so rewards vary even for a random model)
split into curriculum stages, runs the curriculum, checks that each stage saved
full safetensors and that stage 2 started from stage 1, then compares the
logits of stage 2's weights loaded on one device with the same weights sharded
by FSDP2 over all processes (bf16 tolerance).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STAGES = """model: {model}
defaults:
  tools: false
  rewards: [{{name: correctness}}, {{name: format, weight: 0.1}}]
  grpo:
    num_generations: 4
    per_device_train_batch_size: 8
    max_completion_length: {length}
    learning_rate: 1.0e-5
    bf16: {bf16}
    seed: 0
stages:
  - {{name: broad, data: {{split: train, stage: broad}}, steps: {steps}}}
  - {{name: hard, data: {{split: train, stage: hard}}, steps: {steps}}}
"""


def digit_overlap(completion: str, spec: dict, context: dict) -> float:
    """Partial credit: the share of the answer's digits found in the completion (varies for a random model)."""
    answer = spec["answer"]
    return sum(d in completion for d in answer) / len(answer)


def write_run(run: Path, n: int = 64) -> None:
    from trajkit.store import Store

    rng = random.Random(0)
    tasks, stage = [], {}
    for i in range(n):
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        tid = f"add-{i:03d}"
        tasks.append(
            {
                "task_id": tid,
                "question": f"What is {a} + {b}? Answer with the number only.",
                "mode": "imported",
                "verifier": {
                    "kind": "custom",
                    "spec": json.dumps({"path": "bench.grpo_fsdp:digit_overlap", "answer": str(a + b)}),
                },
            }
        )
        stage[tid] = "broad" if i % 2 else "hard"
    store = Store(run, create=True)
    store.write("tasks", "import", tasks)
    store.write("splits", "split", [{"task_id": t["task_id"], "split": "train"} for t in tasks])
    store.write(
        "curriculum", "curriculum", [{"task_id": t, "stage": s, "rollouts_per_prompt": 4} for t, s in stage.items()]
    )
    store.write(
        "passk", "passk", [{"task_id": t["task_id"], "samples": 4, "correct": 1, "difficulty": "hard"} for t in tasks]
    )


COMPARE = r"""
import os, sys, torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from transformers import AutoModelForCausalLM
path, device_kind = sys.argv[1], sys.argv[2]
dist.init_process_group("nccl" if device_kind == "cuda" else "gloo")
rank = dist.get_rank()
device = torch.device(f"cuda:{rank}") if device_kind == "cuda" else torch.device("cpu")
if device_kind == "cuda":
    torch.cuda.set_device(device)
ids = torch.arange(1, 65, device=device).unsqueeze(0)
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to(device).eval()
with torch.no_grad():
    single = model(ids).logits.float()
sharded = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to(device).eval()
for layer in sharded.model.layers:
    fully_shard(layer)
fully_shard(sharded)
from torch.distributed.tensor import DTensor
assert all(isinstance(p, DTensor) for p in sharded.parameters())
with torch.no_grad():
    shard_logits = sharded(ids).logits.float()
diff = (single - shard_logits).abs().max().item()
scale = single.abs().max().item()
if rank == 0:
    print(f"LOGITS max|diff|={diff:.4g} max|logit|={scale:.4g} world={dist.get_world_size()}")
dist.destroy_process_group()
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-processes", type=int, default=1)
    ap.add_argument("--tiny", action="store_true", help="a tiny model instead of the 0.5B shape")
    ap.add_argument("--cpu", action="store_true", help="run on CPU (gloo)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--length", type=int, default=64, help="max completion length")
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args()
    import torch

    if not args.cpu and not torch.cuda.is_available():
        print("skipped: grpo_fsdp needs GPUs (--cpu --tiny runs it on CPU with gloo)")
        return
    from safetensors.torch import load_file

    from trajkit.models.tiny import QWEN2_0_5B_SHAPE, TINY_SHAPE, make_tiny_model

    work = args.workdir or Path(tempfile.mkdtemp(prefix="grpo-fsdp-"))
    model_dir, run = work / "model", work / "run"
    tiny = {**{k: v for k, v in TINY_SHAPE.items() if k != "head_dim"}, "architecture": "qwen2"}
    make_tiny_model(model_dir, **(tiny if args.tiny else QWEN2_0_5B_SHAPE))
    write_run(run)
    stages = work / "stages.yaml"
    stages.write_text(
        STAGES.format(model=model_dir, length=args.length, steps=args.steps, bf16=str(not args.cpu).lower())
    )
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    if args.cpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    cmd = [
        sys.executable,
        "-m",
        "trajkit.cli",
        "train",
        "grpo",
        "--config",
        str(stages),
        "--run",
        str(run),
        "--accelerate-config",
        "fsdp2",
        "--num-processes",
        str(args.num_processes),
    ]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, cwd=ROOT)
    seconds = time.perf_counter() - t0
    s1, s2 = run / "models" / "grpo-broad", run / "models" / "grpo-hard"
    w0, w1, w2 = (load_file(next(p.glob("*.safetensors"))) for p in (model_dir, s1, s2))
    changed1 = sum(not w0[k].equal(w1[k]) for k in w0)
    changed2 = sum(not w1[k].equal(w2[k]) for k in w1)
    print(
        f"curriculum: {seconds:.1f} s on {args.num_processes} process(es); tensors changed: stage 1 {changed1}/{len(w0)}, stage 2 {changed2}/{len(w1)}"
    )
    manifests = sorted(p.parent.name for p in (run / "_stages").glob("grpo*/_manifest*.json"))
    print(f"manifests: {manifests}")
    script = work / "compare.py"
    script.write_text(COMPARE)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc_per_node={args.num_processes}",
            str(script),
            str(s2),
            "cpu" if args.cpu else "cuda",
        ],
        check=True,
        env=env,
    )


if __name__ == "__main__":
    main()
