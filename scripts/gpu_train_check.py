"""``trajkit train grpo`` end to end on a GPU machine: a tiny model, a two-stage curriculum, one process, then FSDP2.

    python3 scripts/gpu_train_check.py      # after the gpu-bundle install (README, "GPU"); also runs on CPU

Both stages train fp32 master weights under bf16 autocast; on CUDA, stage ``broad``
generates from a bf16 copy with a static KV cache and a compiled decode step,
stage ``hard`` with ``compiled_generation: false`` from the policy itself; both
generate two steps' completions per call (``generation_steps: 2``) and are
rewarded by a custom verifier (an even-length answer: a coin flip for a random
model). The same curriculum then runs through ``--accelerate-config fsdp2
--num-processes 1``. Checked: every stage trained its steps with finite rewards
that vary within groups, and saved full safetensors with the tied LM head
stored once. Exits non-zero on the first failed check.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trajkit.store import Store  # after the path insert: the checkout need not be installed

STEPS = 4


def curriculum(model: Path) -> dict:
    return {
        "model": str(model),
        "defaults": {
            "tools": False,
            "generation_steps": 2,
            "rewards": [{"name": "correctness"}, {"name": "format", "weight": 0.1}],
            "grpo": {"per_device_train_batch_size": 8, "max_completion_length": 16, "learning_rate": 5.0e-3, "seed": 0},
        },
        "stages": [
            {"name": "broad", "data": {"stage": "broad"}, "steps": STEPS},
            {"name": "hard", "data": {"stage": "hard"}, "steps": STEPS, "compiled_generation": False},
        ],
    }


def check(store: Store, label: str) -> None:
    from safetensors import safe_open

    rows = store.rows("train_metrics")
    for stage in ("grpo-broad", "grpo-hard"):
        mine = [r for r in rows if r["stage"] == stage]
        rewards = [r["reward_mean"] for r in mine if r["reward_mean"] is not None]
        spread = [r["reward_std"] for r in mine if r["reward_std"] is not None]
        assert len(mine) == STEPS, f"{label} {stage}: {len(mine)} metric rows, expected {STEPS}"
        assert rewards and all(math.isfinite(x) for x in rewards), f"{label} {stage}: rewards {rewards}"
        assert any(s > 0 for s in spread), f"{label} {stage}: no reward variance within groups"
        weights = store.root / "models" / stage / "model.safetensors"
        with safe_open(weights, "pt") as f:
            keys = set(f.keys())
        assert "lm_head.weight" not in keys, f"{label} {stage}: the tied LM head was saved twice"
        print(
            f"{label} {stage}: {len(mine)} steps, reward means {[round(x, 3) for x in rewards]}, {weights.stat().st_size} bytes"
        )


def main() -> None:
    from tests.train import helpers
    from trajkit.models.tiny import make_tiny_model

    work = Path(tempfile.mkdtemp(prefix="gpu-train-check-"))
    model = make_tiny_model(work / "model", seed=0)
    stages = work / "stages.yaml"
    stages.write_text(yaml.safe_dump(curriculum(model)))
    tasks = [helpers.even_task(i) for i in range(8)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(ROOT)]))}
    for label, extra in (("one process", []), ("fsdp2", ["--accelerate-config", "fsdp2", "--num-processes", "1"])):
        run = work / label.replace(" ", "-")
        store = helpers.write_curated(
            run, tasks, {t["task_id"]: ("broad" if i < 4 else "hard") for i, t in enumerate(tasks)}
        )
        cmd = [sys.executable, "-m", "trajkit.cli", "train", "grpo", "--config", str(stages), "--run", str(run), *extra]
        done = subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True, check=False)
        log = [line for line in done.stderr.splitlines() + done.stdout.splitlines() if line.startswith("grpo-")]
        print("\n".join(log))
        if done.returncode:
            sys.exit(f"{label}: exit {done.returncode}\n{done.stderr[-4000:]}")
        check(store, label)
    print(json.dumps({"ok": True, "work": str(work)}))


if __name__ == "__main__":
    main()
