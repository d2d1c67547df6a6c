"""`trajkit synth ...` sub-commands."""

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


@app.command()
def harvest(
    run: RunDir,
    servers: Annotated[
        Path | None, typer.Option("--servers", "-s", help="mcpServers JSON file (as Claude/Cursor/VS Code use).")
    ] = None,
    startup_timeout: Annotated[float | None, typer.Option(help="Seconds to spawn and initialize a server.")] = None,
    concurrency: Annotated[int | None, typer.Option(help="Servers harvested at once.")] = None,
    config: ConfigFile = None,
    overrides: Overrides = None,
    name: Name = None,
    fresh: Fresh = False,
    rank: Rank = 0,
    world_size: WorldSize = 1,
    executor: Executor = "local",
    address: Address = None,
) -> None:
    """Start each MCP server, list its tools, and write the `servers` table (failed servers with a reason)."""
    options = {
        "servers": str(servers) if servers is not None else None,
        "startup_timeout_s": startup_timeout,
        "concurrency": concurrency,
    }
    run_command(
        "synth.harvest",
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


# ---------------------------------------------------------------- tasks, rollouts, judge, filter, extend
PromptsDir = Annotated[
    Path | None, typer.Option("--prompts-dir", help="Directory of prompt files overriding examples/prompts/.")
]


def _path(p: Path | None) -> str | None:
    return str(p) if p is not None else None


@app.command()
def tasks(
    run: RunDir,
    model: ModelName = None,
    backend: Backend = None,
    base_url: BaseUrl = None,
    method: Annotated[str | None, typer.Option(help="direct, vs_standard, vs_cot or vs_multi.")] = None,
    k: Annotated[int | None, typer.Option("--k", help="Candidates per request.")] = None,
    m: Annotated[int | None, typer.Option("--m", help="vs_multi: candidates per turn.")] = None,
    tail: Annotated[float | None, typer.Option(help="Ask for candidates each with probability below this.")] = None,
    mode: Annotated[list[str] | None, typer.Option(help="single_tool, multi_tool, multi_server; repeatable.")] = None,
    requests: Annotated[int | None, typer.Option("--requests", help="Generation requests per mode.")] = None,
    sampling: Annotated[str | None, typer.Option(help="Server draws: uniform, power_law or list.")] = None,
    server: Annotated[list[str] | None, typer.Option(help="Server name or id to use; repeatable.")] = None,
    seed: Seed = None,
    prompts_dir: PromptsDir = None,
    concurrency: Concurrency = None,
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
    """Synthesize tool-use tasks from the `servers` table, with direct or verbalized sampling."""
    options = {
        "model": model_spec(model, backend, base_url),
        "method": method,
        "k": k,
        "m": m,
        "tail": tail,
        "modes": mode,
        "requests_per_mode": requests,
        "sampling": sampling,
        "servers": server,
        "seed": seed,
        "prompts_dir": _path(prompts_dir),
        "concurrency": concurrency,
    }
    run_command(
        "synth.tasks",
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
def rollouts(
    run: RunDir,
    model: ModelName = None,
    backend: Backend = None,
    base_url: BaseUrl = None,
    n: Annotated[int | None, typer.Option("--n", help="Rollouts per task.")] = None,
    target: Annotated[
        int | None, typer.Option(help="Stop once N trajectories are accepted; the rest are aborted.")
    ] = None,
    where: Annotated[str | None, typer.Option(help="SQL condition on the tasks view.")] = None,
    max_turns: Annotated[int | None, typer.Option(help="Model calls per episode.")] = None,
    rollout_fn: Annotated[str | None, typer.Option(help="Custom rollout function, pkg.module:fn.")] = None,
    servers_config: Annotated[Path | None, typer.Option(help="mcpServers file (env values, cwd).")] = None,
    seed: Seed = None,
    concurrency: Concurrency = None,
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
    """Run the agent loop over tasks against the harvested MCP servers; write `trajectories`."""
    options = {
        "model": model_spec(model, backend, base_url),
        "rollouts_per_task": n,
        "target": target,
        "where": where,
        "max_turns": max_turns,
        "rollout_fn": rollout_fn,
        "servers_config": _path(servers_config),
        "seed": seed,
        "concurrency": concurrency,
    }
    run_command(
        "synth.rollouts",
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
def judge(
    run: RunDir,
    model: ModelName = None,
    backend: Backend = None,
    base_url: BaseUrl = None,
    target: Annotated[list[str] | None, typer.Option(help="tasks and/or trajectories; repeatable.")] = None,
    prompts_dir: PromptsDir = None,
    seed: Seed = None,
    concurrency: Concurrency = None,
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
    """LLM-judge tasks (Toucan's six dimensions) and trajectories (completeness, conciseness, tool accuracy)."""
    options = {
        "model": model_spec(model, backend, base_url),
        "targets": target,
        "prompts_dir": _path(prompts_dir),
        "seed": seed,
        "concurrency": concurrency,
    }
    run_command(
        "synth.judge",
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


@app.command("filter")
def filter_(
    run: RunDir,
    rule: Annotated[list[str] | None, typer.Option(help="Rule filter to apply; repeatable (default: all).")] = None,
    min_completeness: Annotated[
        float | None, typer.Option(help="Judge's completeness at least this (default 3).")
    ] = None,
    min_conciseness: Annotated[float | None, typer.Option(help="Judge's conciseness at least this.")] = None,
    min_tool_accuracy: Annotated[float | None, typer.Option(help="Share of target tools used at least this.")] = None,
    min_task_quality: Annotated[
        float | None, typer.Option(help="The task's mean judge score at least this (default 3).")
    ] = None,
    custom: Annotated[
        list[str] | None, typer.Option(help="pkg.module:fn(trajectory) -> reason | None; repeatable.")
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
    """Reject trajectories by rules and judge thresholds; reasons counted, rows kept."""
    options = {
        "rules": rule,
        "min_completeness": min_completeness,
        "min_conciseness": min_conciseness,
        "min_tool_accuracy": min_tool_accuracy,
        "min_task_quality": min_task_quality,
        "custom": custom,
    }
    run_command(
        "synth.filter",
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
def extend(
    run: RunDir,
    model: ModelName = None,
    backend: Backend = None,
    base_url: BaseUrl = None,
    user_model: Annotated[str | None, typer.Option(help="User-simulator model (default: --model).")] = None,
    user_backend: Annotated[str | None, typer.Option(help="User-simulator backend.")] = None,
    user_base_url: Annotated[str | None, typer.Option(help="User-simulator endpoint.")] = None,
    rounds: Annotated[int | None, typer.Option(help="Follow-ups per conversation.")] = None,
    where: Annotated[str | None, typer.Option(help="SQL condition on the trajectories view choosing parents.")] = None,
    servers_config: Annotated[Path | None, typer.Option(help="mcpServers file (env values, cwd).")] = None,
    prompts_dir: PromptsDir = None,
    seed: Seed = None,
    concurrency: Concurrency = None,
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
    """Extend conversations: a user simulator writes a follow-up, the agent loop continues."""
    options = {
        "model": model_spec(model, backend, base_url),
        "user_model": model_spec(user_model, user_backend, user_base_url),
        "rounds": rounds,
        "where": where,
        "servers_config": _path(servers_config),
        "prompts_dir": _path(prompts_dir),
        "seed": seed,
        "concurrency": concurrency,
    }
    run_command(
        "synth.extend",
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
