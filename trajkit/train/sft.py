"""SFT on accepted trajectories with TRL's SFTTrainer; weights to ``RUN/models/<stage>/`` (default ``sft``).

A trajectory that stored ``token_ids`` and ``loss_mask`` trains on exactly those
tokens (what the model generated; prompt and tool output masked) when they are
what training would render for its messages: each trace is compared with TRL's
training chat template rendering its ``messages`` (``models.tokens.
compare_with_template``; a final newline aside), and a trace that differs, or
that the agent loop already found inconsistent (a ``token trace: ...``
reason), trains on its messages instead (``examples.trace_mismatch`` in the
manifest). A trajectory with tokens and no messages trains on its tokens as
stored. Messages and tools are rendered with TRL's training chat template for
the model (``get_training_chat_template``: prefix-preserving, ``{% generation %}``
markers around assistant turns), so only assistant tokens carry loss. trajkit
renders them itself, with tool-call arguments as objects exactly as synthesis
rendered its prompts, so every example reaches ``SFTTrainer`` as ``input_ids``
plus ``assistant_masks``, the pre-tokenized form TRL turns into labels.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from trajkit.config import StageConfig
from trajkit.errors import UserError
from trajkit.runner import StageContext, StageSpec
from trajkit.train.data import sft_rows
from trajkit.train.grpo import trl_config


class SFTStageConfig(StageConfig):
    """Supervised fine-tuning on the run's accepted trajectories."""

    model: str = Field(description="Starting weights: a local model directory (or a Hub id where reachable).")
    tokenizer: str | None = Field(None, description="Tokenizer directory or id (default: the model's).")
    output_dir: str | None = Field(None, description="Where the weights go (default: RUN/models/<stage name>).")
    source: Literal["auto", "tokens", "messages"] = Field(
        "auto", description="auto: token_ids/loss_mask where stored, messages otherwise; or force one."
    )
    limit: int | None = Field(None, ge=1, description="Train on at most this many trajectories.")
    sft: dict[str, Any] = Field(default_factory=dict, description="Passed straight to trl.SFTConfig.")
    dtype: str | None = Field(None, description="Weights dtype when loading (default float32).")


def sft_args(cfg: SFTStageConfig, output_dir: str) -> Any:
    import torch
    from trl import SFTConfig

    defaults: dict[str, Any] = {"logging_steps": 1, "report_to": "none", "save_strategy": "no"}
    if not torch.cuda.is_available():
        defaults.update(bf16=False, gradient_checkpointing=False)
    return trl_config(SFTConfig, {**defaults, **cfg.sft, "output_dir": output_dir}, "sft")


def check_traces(tokenizer: Any, rows: list[dict[str, Any]], counts: Any) -> list[dict[str, Any]]:
    """Keep a row's tokens only where they are what the training template renders for its messages;
    the others fall back to messages (counted as ``examples.trace_mismatch``)."""
    from trajkit.models.tokens import compare_with_template, trace_matches, training_chat_template

    template = training_chat_template(tokenizer)
    out = []
    for row in rows:
        mismatch = row.pop("trace_mismatch", None) is not None
        if "input_ids" in row and row["messages"] and not mismatch:
            diff = compare_with_template(row["input_ids"], row["messages"], tokenizer, row["tools"], template)
            mismatch = not trace_matches(diff)
            if mismatch:
                row = {k: v for k, v in row.items() if k not in ("input_ids", "assistant_masks")}
        counts["examples.trace_mismatch"] += mismatch
        out.append(row)
    return out


def render_messages(tokenizer: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages rows -> ``input_ids`` + ``assistant_masks`` with TRL's training chat template."""
    from trl.chat_template_utils import has_generation_markers

    from trajkit.models.tokens import training_chat_template

    template = training_chat_template(tokenizer)
    if any("input_ids" not in r for r in rows) and not has_generation_markers(template or ""):
        raise UserError(
            "the model's chat template marks no assistant turns ({% generation %}) and TRL has no training "
            "template for it: SFT on messages cannot mask the loss (train on stored tokens: source tokens)"
        )
    out = []
    for row in rows:
        if "input_ids" in row:
            out.append(row)
            continue
        enc = tokenizer.apply_chat_template(
            row["messages"],
            tools=row["tools"] or None,
            chat_template=template,
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
        )
        if not any(enc["assistant_masks"]):
            continue  # no assistant turn to learn from
        out.append(
            {
                "traj_id": row["traj_id"],
                "input_ids": list(enc["input_ids"]),
                "assistant_masks": list(enc["assistant_masks"]),
            }
        )
    return out


def learnable(rows: list[dict[str, Any]], args: Any) -> list[dict[str, Any]]:
    """The rows that keep a trained token once TRL truncates them to ``max_length`` (it drops the others)."""
    if args.max_length is None or args.packing:
        return rows
    cut = slice(None, args.max_length) if args.truncation_mode == "keep_start" else slice(-args.max_length, None)
    return [r for r in rows if any(r["assistant_masks"][cut])]


def run_sft(ctx: StageContext, cfg: SFTStageConfig) -> dict[str, Any]:
    """Train, save full safetensors weights and the tokenizer, write per-step metrics."""
    rows = sft_rows(ctx.store, use_tokens=cfg.source != "messages")
    if not rows:
        raise UserError(
            f'stage {ctx.name!r}: no accepted trajectories (docs/schema.md, "Accepted rows") in {ctx.store.root}'
        )

    from datasets import Dataset
    from trl import SFTTrainer

    from trajkit.train.metrics import drop_stale, make_callback, plot
    from trajkit.train.weights import load_model, load_tokenizer, save_weights

    tokenizer = load_tokenizer(cfg.tokenizer or cfg.model)
    tokenizer.padding_side = "right"
    rows = check_traces(tokenizer, rows, ctx.counts)
    if cfg.source == "tokens":
        rows = [r for r in rows if "input_ids" in r]
    rows = rows[: cfg.limit]
    if not rows:
        raise UserError(f"stage {ctx.name!r}: no trajectory has tokens that match its messages (source tokens)")
    n_tokens = sum("input_ids" in r for r in rows)
    ctx.counts.update({"examples.tokens": n_tokens, "examples.messages": len(rows) - n_tokens})
    drop_stale(ctx)
    rendered = render_messages(tokenizer, rows)
    args = sft_args(cfg, str(ctx.store.stage_dir(ctx.name) / "trainer"))
    rows = learnable(rendered, args)
    if len(rows) < len(rendered):
        ctx.counts["examples.past_max_length"] = len(rendered) - len(rows)
    if not rows:
        raise UserError(
            f"stage {ctx.name!r}: no example has a trained token within sft.max_length ({args.max_length} tokens; "
            "long tool lists fill it): raise it, e.g. --set sft.max_length=4096"
        )
    dataset = Dataset.from_list([{"input_ids": r["input_ids"], "assistant_masks": r["assistant_masks"]} for r in rows])
    metric_rows: list[dict] = []
    trainer = SFTTrainer(
        model=load_model(cfg.model, cfg.dtype),
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[make_callback(ctx.name, metric_rows)],
    )
    trainer.train()
    out_dir = Path(cfg.output_dir) if cfg.output_dir else ctx.store.root / "models" / ctx.name
    acc = trainer.accelerator
    tokenizer.padding_side = "left"
    save_weights(acc.unwrap_model(trainer.model), tokenizer, out_dir, is_main=acc.is_main_process)
    acc.wait_for_everyone()
    if not acc.is_main_process:
        return {}
    ctx.write("train_metrics", metric_rows)
    plot_path = plot(metric_rows, ctx.store.root / "plots" / f"{ctx.name}.png", f"SFT stage {ctx.name}")
    return {
        "output_dir": str(out_dir),
        "plot": str(plot_path),
        "examples": len(rows),
        "steps": len(metric_rows),
        "loss_last": metric_rows[-1]["loss"] if metric_rows else None,
    }


SFT = StageSpec(
    "train.sft",
    SFTStageConfig,
    run_sft,
    inputs=("trajectories",),
    outputs=("train_metrics",),
)
