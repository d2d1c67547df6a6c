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


def addition_rows(n: int, seed: int = 0, max_digits: int = 4, split: str | None = None) -> list[dict[str, Any]]:
    """``n`` addition prompts; ``split`` "train" or "heldout" keeps only pairs of that split (a fifth held out)."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    while len(rows) < n:
        a, b = (rng.randint(1, 10 ** rng.randint(1, max_digits) - 1) for _ in range(2))
        if split is not None and ((a + 7 * b) % 5 == 0) != (split == "heldout"):
            continue
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


# A Qwen2-shaped model of about 4M parameters: SFT on the addition task brings it to a middling pass@1 in seconds.
LEARNING_SHAPE: dict[str, Any] = {
    "architecture": "qwen2",
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
    "tie_word_embeddings": True,
}


def encode_prompts(tok: Any, rows: list[dict[str, Any]]) -> list[list[int]]:
    return [
        tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
        for r in rows
    ]


def heldout_pass1(
    model: Any, tok: Any, rows: list[dict[str, Any]], max_new_tokens: int, seed: int = 1234, greedy: bool = False
) -> float:
    """Held-out pass@1: one sample per prompt at temperature 1 (as GRPO samples), seeded, batched left-padded;
    ``greedy``: the most likely answer instead (how much sharpening the policy could gain at most, roughly)."""
    import torch

    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    hits = 0
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.no_grad():
        torch.manual_seed(seed)
        for i in range(0, len(rows), 128):
            chunk = rows[i : i + 128]
            batch = tok.pad({"input_ids": encode_prompts(tok, chunk)}, return_tensors="pt").to(device)
            sampling = (
                {"do_sample": False} if greedy else {"do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0}
            )
            out = model.generate(**batch, **sampling, max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id)
            texts = tok.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
            hits += sum(r["answer"] in t for r, t in zip(chunk, texts))
    model.train(was_training)
    return hits / len(rows)


def warm_start(
    out: Path,
    train_rows: list[dict[str, Any]],
    heldout: list[dict[str, Any]],
    *,
    target: tuple[float, float] = (0.2, 0.6),
    max_steps: int = 2000,
    batch: int = 64,
    lr: float = 1e-3,
    eval_every: int = 25,
    seed: int = 0,
    **shape: Any,
) -> dict[str, Any]:
    """SFT a fresh random Qwen2-shaped model (``LEARNING_SHAPE``) on ``train_rows`` (answer then EOS) until its
    held-out pass@1 is inside ``target``; saves it to ``out`` (full precision). Returns the steps taken and the
    pass@1 history. Used by every bench that needs a partly trained policy (GRPO parity, curricula)."""
    import torch

    from trajkit.models.tiny import make_tiny_model
    from trajkit.train.weights import load_model, load_tokenizer, save_weights

    make_tiny_model(out, seed=seed, **{**LEARNING_SHAPE, **shape})
    tok = load_tokenizer(str(out))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = load_model(str(out)).to(device)
    prompts = encode_prompts(tok, train_rows)
    answers = [tok(r["answer"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for r in train_rows]
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    rng = random.Random(seed)
    history, step = [], 0
    while step < max_steps:
        for _ in range(eval_every):
            idx = rng.sample(range(len(train_rows)), batch)
            seqs = [prompts[i] + answers[i] for i in idx]
            width = max(map(len, seqs))
            ids = torch.full((batch, width), tok.pad_token_id)
            labels = torch.full((batch, width), -100)
            mask = torch.zeros((batch, width), dtype=torch.long)
            for j, i in enumerate(idx):  # right-padded; loss on the answer only
                s = seqs[j]
                ids[j, : len(s)] = torch.tensor(s)
                mask[j, : len(s)] = 1
                labels[j, len(prompts[i]) : len(s)] = torch.tensor(answers[i])
            with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
                loss = model(input_ids=ids.to(device), attention_mask=mask.to(device), labels=labels.to(device)).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            step += 1
        pass1 = heldout_pass1(model, tok, heldout, max_new_tokens=8)
        history.append((step, pass1))
        if pass1 >= target[0]:
            break
    if not target[0] <= history[-1][1] <= target[1]:
        raise RuntimeError(f"warm start ended at held-out pass@1 {history[-1][1]:.2f}, outside {target}: {history}")
    save_weights(model.cpu(), tok, out)
    return {"steps": step, "pass1": history[-1][1], "history": history}
