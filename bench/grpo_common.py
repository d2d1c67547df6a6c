"""Shared by the GRPO benches: the synthetic addition task, and how much one optimizer step changes the weights.

The addition task: "What is a plus b?" with 1- to 4-digit numbers (prompts of
several lengths, so batches are left-padded); the reward is 1.0 when the
completion contains the sum.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any


def addition_rows(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = (rng.randint(1, 10 ** rng.randint(1, 4) - 1) for _ in range(2))
        rows.append(
            {
                "prompt": [{"role": "user", "content": f"What is {a} plus {b}? Answer with the number."}],
                "answer": str(a + b),
            }
        )
    return rows


def sum_reward(prompts, completions, answer, **_):
    """The synthetic task's verifier: 1.0 when the completion contains the sum."""
    return [1.0 if a in c[0]["content"] else 0.0 for c, a in zip(completions, answer)]


def length_reward(prompts, completions, completion_ids, **_):
    """A reward that varies across a group of fixed completions (so every advantage is nonzero)."""
    return [float(len(ids)) for ids in completion_ids]


def one_step_delta(model_dir: Path, dtype: str | None, grpo: dict[str, Any], lr: float = 1e-6) -> dict[str, Any]:
    """Per parameter, in fp32: the change one GRPO optimizer step makes, on fixed completions.

    Completions are fixed (seeded random token ids of random lengths, rewarded by
    length) so that variants differ only in precision: same samples, same
    advantages, same optimizer (AdamW). Generation is not timed or compiled here.
    """
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from trajkit.train.grpo import TRAJKIT_GRPO
    from trajkit.train.weights import load_model, load_tokenizer

    tok = load_tokenizer(str(model_dir))
    model = load_model(str(model_dir), dtype)
    config = GRPOConfig(
        **{
            **TRAJKIT_GRPO,
            "output_dir": tempfile.mkdtemp(prefix="grpo-updates-"),
            "use_cpu": True,
            "learning_rate": lr,
            "max_steps": 1,
            "per_device_train_batch_size": 8,
            "num_generations": 4,
            "max_completion_length": 12,
            "report_to": "none",
            "save_strategy": "no",
            "seed": 0,
            **grpo,
        }
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=length_reward,
        args=config,
        train_dataset=Dataset.from_list(addition_rows(8)),
        processing_class=tok,
    )
    rng = random.Random(0)
    vocab = min(len(tok), model.config.vocab_size)

    def fixed(prompt_ids, *a, **kw):
        return [[rng.randrange(vocab) for _ in range(rng.randint(1, 12))] for _ in prompt_ids], None

    trainer._generate_single_turn = fixed
    before = {n: p.detach().float().clone() for n, p in model.named_parameters()}
    trainer.train()
    return {n: p.detach().float() - before[n] for n, p in model.named_parameters()}


def update_parity(fast: dict[str, Any], fp32: dict[str, Any]) -> tuple[float, float]:
    """(share of the parameters fp32 changed that ``fast`` also changed, ``fast``'s mean |update| over fp32's)."""
    changed = sum(int((d != 0).sum()) for d in fp32.values())
    both = sum(int(((fast[n] != 0) & (d != 0)).sum()) for n, d in fp32.items())
    mean_fast = sum(float(d.abs().sum()) for d in fast.values())
    mean_fp32 = sum(float(d.abs().sum()) for d in fp32.values())
    return both / changed, mean_fast / mean_fp32
