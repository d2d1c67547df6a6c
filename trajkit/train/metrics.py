"""Per-step training metrics: collected from the trainer's logs, written to ``train_metrics`` and plotted.

Columns: reward mean and std, pass rate (from the correctness reward's
``log_metric``), completion length, the share of groups whose rewards are all
equal (they carry no GRPO signal), loss, the fraction of tokens the importance
ratio clipped, staleness (optimizer steps since the step's samples were
generated), completion tokens per second (cumulative since the stage started)
and every logged value as JSON text. When one generation serves several steps
(``steps_per_generation`` > 1, a stage's ``generation_steps``), the generation
columns are set on the steps that generated and null on the others.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from trajkit import schema as S


def drop_stale(ctx: Any) -> None:
    """An interrupted attempt's ``train_metrics`` rows go (on the main process): training restarts at step 0."""
    stale = ctx.store.ids("train_metrics", stage=ctx.name)
    if stale and os.environ.get("RANK", "0") == "0":
        ctx.store.drop_rows("train_metrics", ctx.name, stale)


COLUMNS = {
    "reward_mean": ("reward",),
    "reward_std": ("reward_std",),
    "pass_rate": ("pass_rate",),
    "completion_length": ("completions/mean_length",),
    "zero_variance_groups": ("frac_reward_zero_std",),
    "loss": ("loss", "train_loss"),
    "clip_fraction": ("clip_ratio/region_mean",),
    "staleness": ("staleness",),
    "tokens_per_s": ("completion_tokens_per_s",),
}
PLOTTED = (
    "reward_mean",
    "pass_rate",
    "reward_std",
    "completion_length",
    "zero_variance_groups",
    "loss",
    "clip_fraction",
    "staleness",
    "tokens_per_s",
)


def metric_row(stage: str, step: int, logs: dict[str, Any]) -> dict[str, Any]:
    """One ``train_metrics`` row from a step's trainer logs."""
    row: dict[str, Any] = {"metric_id": S.content_id(stage, step), "stage": stage, "step": int(step)}
    for column, keys in COLUMNS.items():
        row[column] = next((_num(logs[k]) for k in keys if k in logs), None)
    row["metrics"] = json.dumps(
        {k: _num(v) if isinstance(v, (int, float)) else v for k, v in logs.items()}, default=str
    )
    return row


def _num(value: Any) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def make_callback(stage: str, rows: list[dict[str, Any]]):
    """A ``TrainerCallback`` that appends one row per logged step (main process only).

    It adds ``staleness`` (steps since the last step that generated, which TRL
    logs with a ``reward``) and ``completion_tokens_per_s`` (completions of every
    generation so far, ``args.generation_batch_size`` each, over the wall time
    since training began) to the logs.
    """
    import time

    from transformers import TrainerCallback

    class MetricsCallback(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            self.t0, self.tokens, self.generated_at = time.perf_counter(), 0.0, 0

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero or not logs:
                return
            if any(k in logs for k in ("train_runtime", "train_samples_per_second")):
                return  # the end-of-training summary, not a step
            if "reward" in logs:
                self.generated_at = state.global_step
                self.tokens += float(logs.get("completions/mean_length", 0.0)) * args.generation_batch_size
            logs = {
                **logs,
                "staleness": state.global_step - self.generated_at,
                "completion_tokens_per_s": self.tokens / max(time.perf_counter() - self.t0, 1e-9),
            }
            if rows and rows[-1]["step"] == state.global_step:
                merged = {**json.loads(rows[-1]["metrics"]), **logs}
                rows[-1] = metric_row(stage, state.global_step, merged)
            else:
                rows.append(metric_row(stage, state.global_step, logs))

    return MetricsCallback()


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> Path:
    """A PNG with one panel per metric against the step, reward and pass rate first."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    present = [c for c in PLOTTED if any(r.get(c) is not None for r in rows)] or ["reward_mean"]
    fig, axes = plt.subplots(len(present), 1, figsize=(6, 1.8 * len(present) + 0.6), sharex=True, squeeze=False)
    for ax, column in zip(axes[:, 0], present):
        pts = [(r["step"], r[column]) for r in rows if r.get(column) is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3)
        ax.set_ylabel(column.replace("_", " "), fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("step")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
