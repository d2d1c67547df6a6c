"""One GRPO curriculum stage as a resumable trajkit stage: curated tasks in, TRL's GRPOTrainer, weights out.

The stage reads tasks with pyarrow, starts the verification sandbox (before
anything can initialize CUDA), builds a ``datasets.Dataset`` (conversational
``prompt`` plus the reward columns), offers the tasks' MCP tools through TRL's
``environment_factory``, trains for ``steps`` optimizer steps, saves full
safetensors weights and the tokenizer to ``RUN/models/<stage>/`` and writes
per-step metrics to ``train_metrics`` and a plot to ``RUN/plots/<stage>.png``.

``grpo:`` is passed straight to ``GRPOConfig`` over trajkit's defaults
(``TRAJKIT_GRPO``: token-level loss, clip-higher 0.28, no KL), so every TRL
option is available without trajkit re-declaring it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import math
import os
from pathlib import Path
from typing import Any

from pydantic import Field

from trajkit.config import StageConfig, Unhashed
from trajkit.envs.config import ServersFile
from trajkit.envs.solve import NO_TOOLS, grpo_rows
from trajkit.errors import UserError
from trajkit.runner import StageContext, StageSpec
from trajkit.train.data import DataFilter, task_rows
from trajkit.train.rewards import Conciseness, RewardSpec
from trajkit.verify.backends import SANDBOX_HELP, SandboxKind, sandbox_for

TRAJKIT_GRPO: dict[str, Any] = {"loss_type": "dapo", "epsilon_high": 0.28, "beta": 0.0}
DEFAULT_REWARDS = [
    RewardSpec(name="correctness"),
    RewardSpec(name="format", weight=0.1),
    RewardSpec(name="tool_calls", weight=0.2),
    RewardSpec(name="overlong"),
]


class GRPOStageConfig(StageConfig):
    """One curriculum stage of GRPO."""

    model: str = Field(description="Starting weights: a local model directory (or a Hub id where reachable).")
    tokenizer: str | None = Field(None, description="Tokenizer directory or id (default: the model's).")
    output_dir: str | None = Field(None, description="Where the weights go (default: RUN/models/<stage name>).")
    data: DataFilter = Field(default_factory=DataFilter, description="Which curated tasks this stage trains on.")
    steps: int = Field(ge=1, description="Optimizer steps of this stage (GRPOConfig.max_steps).")
    grpo: dict[str, Any] = Field(
        default_factory=dict, description="Passed straight to trl.GRPOConfig, over trajkit's defaults."
    )
    rewards: list[RewardSpec] = Field(default_factory=lambda: list(DEFAULT_REWARDS))
    conciseness: Conciseness = Field(default_factory=Conciseness)
    tools: bool = Field(True, description="Offer each task's MCP servers as tools (multi-turn GRPO).")
    servers_config: ServersFile[str | None] = Field(
        None, description="The mcpServers file, for the env values, headers and cwd of the run's servers."
    )
    sandbox: Unhashed[SandboxKind] = Field("local", description=SANDBOX_HELP)
    tool_timeout_s: float = Field(30.0, gt=0, description="Per tool call, as in rollouts.")
    max_tool_output_chars: int = Field(4000, ge=1, description="Tool output beyond it is cut, as in rollouts.")
    system_prompt: str | None = Field(None, description="A system message put before each task's question.")
    dtype: str | None = Field(
        None,
        description="Weights dtype when loading (default float32: fp32 master weights, bf16 autocast and TF32 on GPU). "
        "bfloat16 trains the weights in bf16, where updates at RL learning rates round away.",
    )
    compiled_generation: bool = Field(
        True,
        description="On one CUDA GPU or DDP, without vLLM: generate from a bf16 copy of the policy, refreshed after "
        "every optimizer step, with a static KV cache and compiled decode (trajkit.train.speed).",
    )
    generation_steps: int | None = Field(
        None,
        ge=1,
        description="Generate this many optimizer steps' completions in one generate call and train each step as one "
        "micro-batch without activation recompute (trajkit.train.speed.batch_shape; 4.4x tokens/s on an H200 in "
        "bench/grpo_gpu.py). Steps 2..N of a generation train on completions 1..N-1 optimizer steps old (the importance "
        "ratio clip bounds it; train_metrics has staleness and clip_fraction). The step's activations must fit in memory.",
    )


def grpo_args(cfg: GRPOStageConfig, output_dir: str, weights: list[float], num_generations: int | None) -> Any:
    """The ``GRPOConfig``: trajkit's defaults, then the stage's ``grpo:`` mapping, then what the stage fixes."""
    import torch
    from trl import GRPOConfig

    from trajkit.train.speed import fast_settings

    defaults: dict[str, Any] = {
        **TRAJKIT_GRPO,
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "no",
        "reward_weights": weights,
    }
    defaults.update(fast_settings(torch.cuda.is_available()))
    if num_generations:
        defaults["num_generations"] = num_generations
    kwargs = {**defaults, **cfg.grpo, "output_dir": output_dir, "max_steps": cfg.steps}
    if cfg.generation_steps:
        from trajkit.train.speed import batch_shape

        trl_default = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
        per_step = math.prod(
            kwargs.get(k, trl_default[k]) for k in ("per_device_train_batch_size", "gradient_accumulation_steps")
        )
        shape = batch_shape(per_step, cfg.generation_steps)
        kwargs.update({k: v for k, v in shape.items() if k != "gradient_checkpointing" or k not in cfg.grpo})
    return trl_config(GRPOConfig, kwargs, "grpo")


def _trl_parser(config_cls: type, mapping: dict[str, Any]) -> tuple[Any, list[str]]:
    """TRL's parser of ``config_cls`` with ``mapping`` as its values, as ``TrlParser`` reads a YAML config, and
    the keys of ``mapping`` that are no field of it."""
    from trl import TrlParser

    parser = TrlParser(config_cls, exit_on_error=False)
    return parser, parser.set_defaults_with_config(**mapping)[0::2]  # ["--key", "value", ...]


def trl_config(config_cls: type, mapping: dict[str, Any], where: str) -> Any:
    """A TRL config (``GRPOConfig``, ``SFTConfig``) from a mapping, read by TRL's own parser: values typed by
    their fields (YAML reads ``1e-6`` as text); an unknown key or a bad value is a user error in one line."""
    parser, unknown = _trl_parser(config_cls, mapping)
    if unknown:
        names = ", ".join(f"{where}.{k.removeprefix('--')}" for k in unknown)
        raise UserError(f"invalid {where}: mapping: {names}: not a {config_cls.__name__} field")
    try:
        (args,) = parser.parse_args_into_dataclasses(args=[])
    except (argparse.ArgumentError, ValueError, TypeError) as e:
        raise UserError(f"invalid {where}: mapping: {str(e).splitlines()[0]}") from None
    return args


def check_grpo_mapping(grpo: dict[str, Any], where: str = "grpo") -> list[str]:
    """Problems with a ``grpo:`` mapping: keys TRL's parser does not know, values it cannot read as their fields'
    types, keys the stage sets, vLLM unavailable."""
    from trl import GRPOConfig

    parser, unknown = _trl_parser(GRPOConfig, grpo)
    problems = [f"{where}.{k.removeprefix('--')}: not a GRPOConfig field" for k in unknown]
    try:
        parser.parse_known_args(args=[])  # types the values, builds no config
    except argparse.ArgumentError as e:
        problems.append(f"{where}: {e}")
    problems += [
        f"{where}.{k}: set by the stage (use steps: / output_dir:)" for k in ("max_steps", "output_dir") if k in grpo
    ]
    if grpo.get("use_vllm"):
        problems += vllm_problems()
    return problems


def vllm_problems() -> list[str]:
    """Why vLLM generation cannot run here, if it cannot (asked through NVML: CUDA stays uninitialized)."""
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch

    if importlib.util.find_spec("vllm") is None:
        return ["use_vllm needs the vllm extra: pip install 'trajkit[vllm]' (and a CUDA GPU)"]
    if not torch.cuda.is_available():
        return ["use_vllm needs a CUDA GPU; none is visible"]
    return []


def run_grpo(ctx: StageContext, cfg: GRPOStageConfig) -> dict[str, Any]:
    """Train one curriculum stage; returns a summary for the manifest."""
    problems = check_grpo_mapping(cfg.grpo)
    if problems:
        raise UserError(f"stage {ctx.name!r}: " + "; ".join(problems))
    from trajkit.verify import check_custom_verifiers

    tasks = task_rows(ctx.store, cfg.data)
    rows = grpo_rows(tasks, cfg.system_prompt)
    if not rows:
        raise UserError(f"stage {ctx.name!r}: no tasks match the data filter {cfg.data.model_dump(exclude_none=True)}")
    check_custom_verifiers({"kind": r["verifier_kind"], "spec": r["verifier_spec"]} for r in rows)
    ctx.counts["tasks"] = len(rows)
    per_prompt = {t["rollouts_per_prompt"] for t in tasks if t.get("rollouts_per_prompt")}
    num_generations = per_prompt.pop() if len(per_prompt) == 1 and "num_generations" not in cfg.grpo else None
    out_dir = Path(cfg.output_dir) if cfg.output_dir else ctx.store.root / "models" / ctx.name
    # the sandbox starts first, before the model loads: its workers must fork before CUDA is initialized
    with (
        sandbox_for({r["verifier_kind"] for r in rows}, cfg.sandbox, share=ctx.share) as sandbox,
        contextlib.ExitStack() as closing,
    ):
        return _train(ctx, cfg, rows, sandbox, closing, out_dir, num_generations)  # closing: what rewards hold open


def fill_generation_batch(ctx: StageContext, rows: list[dict], args: Any) -> list[dict]:
    """``rows`` repeated until one generation batch has enough distinct prompts: TRL's sampler drops an
    incomplete batch, so a stage with fewer tasks than that would silently train for zero steps."""
    need = args.generation_batch_size // args.num_generations
    if len(rows) >= need:
        return rows
    ctx.log(f"{len(rows)} task(s), fewer than the {need} prompts of a generation batch: repeated to fill it")
    return (rows * math.ceil(need / len(rows)))[:need]


def _train(
    ctx: StageContext,
    cfg: GRPOStageConfig,
    rows: list[dict],
    sandbox: Any,
    closing: contextlib.ExitStack,
    out_dir: Path,
    num_generations: int | None,
) -> dict[str, Any]:
    from datasets import Dataset
    from trl import GRPOTrainer

    from trajkit.train.metrics import drop_stale, make_callback, plot
    from trajkit.train.rewards import build_rewards
    from trajkit.train.weights import load_model, load_tokenizer, save_weights

    max_len = int(cfg.grpo.get("max_completion_length", 512))
    funcs, weights = build_rewards(cfg.rewards, cfg.conciseness, max_len, closing, sandbox)  # user paths fail first
    args = grpo_args(cfg, str(ctx.store.stage_dir(ctx.name) / "trainer"), weights, num_generations)
    drop_stale(ctx)
    tokenizer = load_tokenizer(cfg.tokenizer or cfg.model)
    tools = None
    if cfg.tools and any(r["environment"] != NO_TOOLS for r in rows):
        from trajkit.train.tools import environment_factories

        tools = environment_factories(
            ctx.store,
            {r["environment"] for r in rows},
            tokenizer,
            config=cfg.servers_config,
            share=ctx.share,
            timeout_s=cfg.tool_timeout_s,
            max_chars=cfg.max_tool_output_chars,
        )
    for r in rows:
        r["tools_json"] = json.dumps(tools.schemas[r["environment"]] if tools else [])
    rows = fill_generation_batch(ctx, rows, args)
    try:
        model = load_model(cfg.model, cfg.dtype)
    except BaseException:
        if tools:
            tools.close()
        raise
    metric_rows: list[dict] = []
    try:
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=funcs,
            args=args,
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
            callbacks=[make_callback(ctx.name, metric_rows)],
            environment_factory=tools.factories if tools else None,
        )
    except ValueError as e:
        if tools:
            tools.close()
        raise UserError(f"stage {ctx.name!r}: {str(e).splitlines()[0]}") from None
    sharded = getattr(trainer, "is_fsdp_enabled", False) or getattr(trainer, "is_deepspeed_enabled", False)
    if cfg.compiled_generation and trainer.accelerator.device.type == "cuda" and not sharded:
        from trajkit.train.speed import compile_generation

        compile_generation(trainer)
    try:
        ctx.log(f"{len(rows)} tasks, {cfg.steps} steps, {args.num_generations} generations per prompt")
        trainer.train()
        acc = trainer.accelerator
        save_weights(acc.unwrap_model(trainer.model), tokenizer, out_dir, is_main=acc.is_main_process)
        acc.wait_for_everyone()
    finally:
        if tools:
            tools.close()  # every environment its factories made, then the servers
    if not trainer.accelerator.is_main_process:
        return {}
    ctx.write("train_metrics", metric_rows)
    plot_path = plot(metric_rows, ctx.store.root / "plots" / f"{ctx.name}.png", f"GRPO stage {ctx.name}")
    last = metric_rows[-1] if metric_rows else {}
    ctx.counts["steps"] = len(metric_rows)
    return {
        "output_dir": str(out_dir),
        "plot": str(plot_path),
        "tasks": len(rows),
        "steps": cfg.steps,
        "reward_mean_last": last.get("reward_mean"),
        "pass_rate_last": last.get("pass_rate"),
        "grpo": {k: v for k, v in vars(args).items() if k in set(TRAJKIT_GRPO) | set(cfg.grpo)},
    }


GRPO = StageSpec(
    "train.grpo",
    GRPOStageConfig,
    run_grpo,
    inputs=("tasks", "passk", "splits", "curriculum", "servers"),
    outputs=("train_metrics",),
)
