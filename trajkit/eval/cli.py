"""`trajkit eval ...` sub-commands: pass@k, tool-call accuracy (BFCL-style), diversity.

Each runs its stage (resumable; named ``eval-passk``, ``eval-tools``,
``eval-diversity`` unless ``--name``) and prints the report kept in the
stage's manifest, so rerunning a finished evaluation shows it again. pass@k
and tool accuracy shard like the other stages (``--rank/--world-size`` by
hand, or ``--executor ray``: then the report covers every shard's rows).
"""

from __future__ import annotations

from typing import Annotated, Any

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

Models = Annotated[
    list[str] | None,
    typer.Option("--model", "-m", help="Model (local directory, Hub id or served name); repeat to compare models."),
]
Split = Annotated[str | None, typer.Option(help="train or held_out (default: held_out).")]
Limit = Annotated[int | None, typer.Option(help="Evaluate only the first N items.")]


def _models(models: list[str] | None, backend: str | None, base_url: str | None) -> list[dict[str, Any]] | None:
    """The ``models:`` list: every --model with the same --backend and --base-url."""
    if not models:
        return None
    return [model_spec(m, backend, base_url) for m in models]


@app.command()
def passk(
    run: RunDir,
    models: Models = None,
    backend: Backend = None,
    base_url: BaseUrl = None,
    split: Split = None,
    n: Annotated[int | None, typer.Option("--n", help="Attempts per task (default 10).")] = None,
    ks: Annotated[
        list[int] | None, typer.Option("--at", help="Report pass@k at this k; repeatable (default 1, 5, 10).")
    ] = None,
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature (default 0.8).")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Tokens per completion (default 1024).")] = None,
    seed: Seed = None,
    sandbox: Annotated[
        str | None, typer.Option("--sandbox", help="Where code is verified: local (default) or e2b.")
    ] = None,
    limit: Limit = None,
    concurrency: Concurrency = None,
    config: ConfigFile = None,
    overrides: Overrides = None,
    name: Name = None,
    fresh: Fresh = False,
    rank: Rank = 0,
    world_size: WorldSize = 1,
    executor: Executor = "local",
    address: Address = None,
    budget_tokens: BudgetTokens = None,
    budget_cost: BudgetCost = None,
) -> None:
    """pass@k of one or two+ models on the held-out tasks, per difficulty bucket and overall (eval_passk)."""
    from trajkit.eval.report import print_passk

    options = {
        "models": _models(models, backend, base_url),
        "split": split,
        "n": n,
        "ks": ks,
        "temperature": temperature,
        "max_tokens": max_tokens,
        "seed": seed,
        "sandbox": sandbox,
        "limit": limit,
        "concurrency": concurrency,
    }
    manifest = run_command(
        "eval.passk",
        run,
        options,
        config,
        overrides,
        name or "eval-passk",
        fresh,
        rank,
        world_size,
        budget_tokens,
        budget_cost,
        executor,
        address,
    )
    print_passk(manifest["summary"])


@app.command()
def tools(
    run: RunDir,
    models: Models = None,
    backend: Backend = None,
    base_url: BaseUrl = None,
    split: Split = None,
    bfcl: Annotated[
        list[str] | None,
        typer.Option(
            "--bfcl",
            help="BFCL category instead of trajectories: simple, multiple, parallel, parallel_multiple, "
            "irrelevance, their live_ versions, live_relevance, or the groups non_live, live, all; repeatable.",
        ),
    ] = None,
    abstention: Annotated[
        bool | None, typer.Option("--abstention/--no-abstention", help="Score turns without calls too.")
    ] = None,
    seed: Seed = None,
    limit: Limit = None,
    concurrency: Concurrency = None,
    config: ConfigFile = None,
    overrides: Overrides = None,
    name: Name = None,
    fresh: Fresh = False,
    rank: Rank = 0,
    world_size: WorldSize = 1,
    executor: Executor = "local",
    address: Address = None,
    budget_tokens: BudgetTokens = None,
    budget_cost: BudgetCost = None,
) -> None:
    """Tool-call accuracy on held-out trajectories (or BFCL's AST categories), per tool and per server (eval_tools)."""
    from trajkit.eval.report import print_tools

    options = {
        "models": _models(models, backend, base_url),
        "split": split,
        "bfcl": bfcl,
        "abstention": abstention,
        "seed": seed,
        "limit": limit,
        "concurrency": concurrency,
    }
    manifest = run_command(
        "eval.tools",
        run,
        options,
        config,
        overrides,
        name or "eval-tools",
        fresh,
        rank,
        world_size,
        budget_tokens,
        budget_cost,
        executor,
        address,
    )
    print_tools(manifest["summary"])


@app.command()
def diversity(
    run: RunDir,
    table: Annotated[str | None, typer.Option(help="Table holding the texts (default: tasks).")] = None,
    column: Annotated[str | None, typer.Option(help="Text column or SQL expression (default: question).")] = None,
    group_by: Annotated[
        str | None,
        typer.Option(help="Column or SQL expression grouping rows: source_id (generation request), vs_method."),
    ] = None,
    where: Annotated[str | None, typer.Option(help="SQL filter on the table.")] = None,
    max_rows: Annotated[int | None, typer.Option(help="Rows read at most (default 20000).")] = None,
    model_dir: Annotated[
        str | None, typer.Option("--embedding-model", help="Local sentence-transformers model directory.")
    ] = None,
    config: ConfigFile = None,
    overrides: Overrides = None,
    name: Name = None,
    fresh: Fresh = False,
) -> None:
    """Semantic diversity, distinct-n and self-BLEU of a text column, per group and overall (no table written)."""
    from trajkit.eval.report import print_diversity

    options = {
        "table": table,
        "column": column,
        "group_by": group_by,
        "where": where,
        "max_rows": max_rows,
        "embedding_model": model_dir,
    }
    manifest = run_command("eval.diversity", run, options, config, overrides, name or "eval-diversity", fresh)
    print_diversity(manifest["summary"])
