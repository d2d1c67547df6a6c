"""Shared pieces of the stage sub-commands: common options and one way to run a stage.

Each stage's ``cli.py`` declares its own options and calls ``run_command``;
light imports only, so ``trajkit --help`` stays instant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

RunDir = Annotated[Path, typer.Option("--run", "-r", help="Run directory (created if missing).")]
ConfigFile = Annotated[Path | None, typer.Option("--config", "-c", help="YAML file with the stage's config.")]
Overrides = Annotated[
    list[str] | None, typer.Option("--set", help="Config override KEY=VALUE (YAML value); repeatable.")
]
Name = Annotated[str | None, typer.Option("--name", help="Stage name in the run (default: the command's name).")]
Fresh = Annotated[bool, typer.Option("--fresh", help="Delete this stage's output and start over.")]
Rank = Annotated[int, typer.Option("--rank", help="This process's shard, 0-based.")]
WorldSize = Annotated[int, typer.Option("--world-size", help="Number of shards the stage is split into.")]
Executor = Annotated[
    str,
    typer.Option("--executor", help="local: run shard --rank here; ray: run all --world-size shards on a Ray cluster."),
]
Address = Annotated[
    str | None, typer.Option("--address", help="Ray cluster address (default: start a local one for the run).")
]
BudgetTokens = Annotated[int | None, typer.Option("--budget-tokens", help="Stop cleanly after this many tokens.")]
BudgetCost = Annotated[float | None, typer.Option("--budget-cost", help="Stop cleanly after this cost.")]
ModelName = Annotated[
    str | None, typer.Option("--model", "-m", help="Model: a local directory, Hub id or served name.")
]
Backend = Annotated[str | None, typer.Option("--backend", help="transformers, openai or vllm.")]
BaseUrl = Annotated[
    list[str] | None,
    typer.Option("--base-url", help="OpenAI-compatible endpoint (backend openai); repeat for several endpoints."),
]
Seed = Annotated[int | None, typer.Option("--seed", help="Base seed; every row derives its own from it.")]
Concurrency = Annotated[int | None, typer.Option("--concurrency", help="Requests or episodes in flight.")]


def model_spec(
    model: str | None, backend: str | None = None, base_url: list[str] | None = None
) -> dict[str, Any] | None:
    """The ``model:`` mapping a stage config takes, from the common options (None if none given)."""
    if base_url is not None:
        base_url = base_url[0] if len(base_url) == 1 else base_url or None
    spec = {k: v for k, v in {"model": model, "backend": backend, "base_url": base_url}.items() if v is not None}
    return spec or None


def run_command(
    kind: str,
    run: Path,
    options: dict[str, Any],
    config: Path | None = None,
    overrides: list[str] | None = None,
    name: str | None = None,
    fresh: bool = False,
    rank: int = 0,
    world_size: int = 1,
    budget_tokens: int | None = None,
    budget_cost: float | None = None,
    executor: str = "local",
    address: str | None = None,
) -> dict[str, Any] | list[dict[str, Any]]:
    """Build a stage's config from YAML, options and overrides, validate it, run the stage: its shard
    ``rank`` here (returns its manifest), or with ``executor="ray"`` all ``world_size`` shards on Ray
    (returns their manifests as ``shards`` and a reporting stage's ``summary`` over all of them)."""
    from trajkit.config import build, read_yaml
    from trajkit.errors import UserError
    from trajkit.runner import run_stage
    from trajkit.stages import get_stage
    from trajkit.store import Store

    spec = get_stage(kind)
    from_file = read_yaml(config) if config else {}
    cfg = build(spec.config, from_file, options, overrides=overrides or [], where=kind)
    if executor not in ("local", "ray"):
        raise UserError(f"--executor must be local or ray, not {executor!r}")
    if executor == "ray":
        if rank:
            raise UserError("--rank is for the local executor; --executor ray runs every shard")
        from trajkit.executors.ray import run_on_ray

        name = name or spec.kind.split(".")[-1]
        return run_on_ray(run, spec, cfg, name, fresh, world_size, address, budget_tokens, budget_cost)
    store = Store(run, create=True)
    return run_stage(
        store,
        spec,
        cfg,
        name=name,
        fresh=fresh,
        rank=rank,
        world_size=world_size,
        budget_tokens=budget_tokens,
        budget_cost=budget_cost,
    )
