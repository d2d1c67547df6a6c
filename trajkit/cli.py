"""The ``trajkit`` command: one sub-app per stage, plus run-directory tools.

Thin by design: parse, call into the package, report. A user error prints one
line and exits 2; heavy libraries are imported inside the commands only.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from trajkit.clikit import Address, Overrides, ReuseCache, RunDir, TopGroup
from trajkit.curate.cli import app as curate_app
from trajkit.data_cards import cli as cards_cli
from trajkit.eval.cli import app as eval_app
from trajkit.models.cli import app as model_app
from trajkit.synth.cli import app as synth_app
from trajkit.train.cli import app as train_app
from trajkit.view import cli as view_cli

app = typer.Typer(
    name="trajkit",
    help="Post-training data for tool-using LLM agents: synthesize, curate, train, evaluate, publish.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    cls=TopGroup,
)


@app.callback()
def _options(
    allow_weaker_sandbox: Annotated[
        bool,
        typer.Option(
            "--allow-weaker-sandbox",
            help="Run code and MCP servers even where this machine cannot give every sandbox protection "
            "(each missing one is logged). Without it, a missing protection stops the start.",
        ),
    ] = False,
    keep_env_state: Annotated[
        Path | None,
        typer.Option(
            "--keep-env-state",
            help="Keep what each trajectory's MCP server instances wrote (their copy-on-write layers) in a "
            "subfolder of this folder, for inspection; without it those writes vanish with the trajectory.",
        ),
    ] = None,
) -> None:
    """Post-training data for tool-using LLM agents."""
    if allow_weaker_sandbox:
        from trajkit.confine.isolation import ALLOW_WEAKER_ENV

        os.environ[ALLOW_WEAKER_ENV] = "1"
    if keep_env_state is not None:
        from trajkit.envs.contain import ENV_KEEP

        keep_env_state.mkdir(parents=True, exist_ok=True)
        os.environ[ENV_KEEP] = str(keep_env_state.resolve())


app.add_typer(synth_app, name="synth", help="Harvest MCP servers, synthesize tasks, roll out, judge, extend.")
app.add_typer(curate_app, name="curate", help="Import, verify, pass@k-tag, dedup, decontaminate, split, curriculum.")
app.add_typer(train_app, name="train", help="SFT and GRPO with TRL on the curated data.")
app.add_typer(eval_app, name="eval", help="pass@k, tool-call accuracy, diversity.")
app.add_typer(
    model_app,
    name="model",
    help="Local models: build a tiny model, serve a stand-in model for dry runs, record any agent's calls.",
)
app.command("card")(cards_cli.card)
app.command("push")(cards_cli.push)
app.command("view")(view_cli.view)

RunExisting = Annotated[Path, typer.Option("--run", "-r", help="Run directory.")]
DEMO_PIPELINE = Path(__file__).resolve().parent / "demo" / "demo.yaml"  # in the wheel; examples/demo.yaml links here


@app.command()
def sql(
    query: Annotated[str, typer.Argument(help="A DuckDB query over the run's tables (views named after them).")],
    run: RunExisting = Path("."),
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, csv or json.")] = "table",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to a .csv, .json, .jsonl or .parquet file.")
    ] = None,
    limit: Annotated[int, typer.Option(min=0, help="Rows shown in table format.")] = 50,
) -> None:
    """Query a run with DuckDB SQL, e.g. `SELECT difficulty, count(*) FROM tasks GROUP BY 1`."""
    from trajkit.store import existing_run
    from trajkit.tabular import print_table, write_table

    if fmt not in ("table", "csv", "json"):
        raise _user(f"--format must be table, csv or json, not {fmt!r}")
    result = existing_run(run).sql(query)
    if output is not None:
        write_table(result, output)
        typer.echo(f"wrote {result.num_rows} rows to {output}", err=True)
    elif fmt == "table":
        print_table(result, limit)
    else:
        write_table(result, sys.stdout, fmt)


@app.command()
def info(run: RunExisting = Path(".")) -> None:
    """Row counts, schema versions and stage manifests of a run directory."""
    from rich.console import Console
    from rich.table import Table

    from trajkit import schema as S
    from trajkit.store import existing_run

    store = existing_run(run)
    console = Console()
    for line in store.problems():  # only the shards stages listed are read: what else is there, or changed
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    for stage in sorted(store.legacy_stages()):
        line = f"stage {stage!r} was written before stages listed their shards: its shards are taken as found"
        console.print(line + " (a rerun with --fresh lists them)", markup=False, highlight=False, soft_wrap=True)
    tables = Table("table", "rows", "shards", "schema", title=f"tables in {run}")
    for name in store.tables():
        paths = store.validate(name)
        tables.add_row(name, str(store.count(name)), str(len(paths)), f"v{S.table(name).version}")
    console.print(tables)
    stages = Table("stage", "kind", "finished", "seconds", "rows written", "tokens", "config", title="stages")
    for m in store.manifests():
        out = ", ".join(f"{k} {v}" for k, v in m.get("outputs", {}).items())
        usage = m.get("usage", {})
        tokens = usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
        stages.add_row(
            m["stage"], m["kind"], m["finished_at"], f"{m['seconds']:.1f}", out, str(tokens), m["config_hash"]
        )
    console.print(stages)
    running = [
        p.parent.name
        for p in (store.root / "_stages").glob("*/_config.json")
        if not list(p.parent.glob("_manifest*.json"))
    ]
    if running:
        console.print(f"incomplete stages (rerun to resume): {', '.join(sorted(running))}")


@app.command()
def show(
    row_id: Annotated[str, typer.Argument(help="A task, trajectory, sample or server id (a unique prefix works).")],
    run: RunExisting = Path("."),
) -> None:
    """Render one row as a conversation."""
    from trajkit import schema as S
    from trajkit.render import print_row
    from trajkit.store import existing_run

    if not row_id.strip() or not row_id.isprintable():
        raise _user(f"give a row id (or a unique prefix of one), not {row_id!r}")
    store = existing_run(run)
    con = store.duckdb()
    for name in ("trajectories", "tasks", "samples", "servers"):
        key = S.table(name).key
        rows = (
            con.sql(f'SELECT * FROM "{name}" WHERE starts_with({key}, ?) LIMIT 2', params=[row_id])
            .to_arrow_table()
            .to_pylist()
        )
        if len(rows) > 1:
            raise _user(f"id prefix {row_id!r} matches several {name}; give more characters")
        if rows:
            print_row(rows[0], name)
            return
    raise _user(f"no task, trajectory, sample or server with id {row_id!r} in {run}")


@app.command()
def export(
    output: Annotated[Path, typer.Argument(help="Output .jsonl file.")],
    run: RunExisting = Path("."),
    fmt: Annotated[
        str, typer.Option("--format", "-f", help="jsonl (all columns), openai (messages+tools) or sharegpt.")
    ] = "openai",
    where: Annotated[
        str | None, typer.Option(help='Extra SQL filter on the trajectories view, e.g. "num_turns <= 8".')
    ] = None,
    all_rows: Annotated[
        bool, typer.Option("--all", help="Every trajectory, failed and rejected ones too (not training-ready).")
    ] = False,
    label: Annotated[
        list[str] | None,
        typer.Option(help="Only rows a review gave this label (labels.yaml); repeat for any of several."),
    ] = None,
    without_label: Annotated[list[str] | None, typer.Option(help="No row a review gave this label.")] = None,
) -> None:
    """Write accepted trajectories (docs/schema.md, "Accepted rows") as JSON lines for other tools."""
    from trajkit.export import FORMATS, convert, query
    from trajkit.store import existing_run
    from trajkit.tabular import json_safe

    if fmt not in FORMATS:
        raise _user(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    store = existing_run(run)
    if output.is_dir():
        raise _user(f"{output} is a directory: give the path of a .jsonl file")
    if problems := store.problems():
        raise _user(
            f"{problems[0]} ({len(problems)} shard(s) disagree with what their stages listed): remove the files "
            "no stage listed, redo the stages of changed or missing ones with --fresh (`trajkit info` lists them)"
        )
    sql = query(store, all_rows, where, label or (), without_label or ())
    rows = store.redactor.table(store.sql(sql)).to_pylist()  # a second look: shards an older trajkit wrote
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        with open(output, "w") as f:
            lines = (
                json.dumps(json_safe(rec), ensure_ascii=False, default=str, allow_nan=False)
                for rec in convert(rows, fmt)
            )
            f.writelines(line + "\n" for line in lines)
    except OSError as e:
        raise _user(f"cannot write {output}: {e.strerror or e}") from None
    kind = "trajectories" if all_rows else "accepted trajectories"
    typer.echo(f"wrote {len(rows)} {kind} to {output} ({fmt})", err=True)


@app.command("run")
def run_cmd(
    pipeline: Annotated[Path, typer.Argument(help="Pipeline YAML: a list of stages with their configs.")],
    run: RunDir,
    fresh: Annotated[bool, typer.Option("--fresh", help="Start every stage over.")] = False,
    overrides: Overrides = None,
    executor: Annotated[
        str,
        typer.Option(
            help="local: every stage in this process; ray: each stage's --world-size shards on a Ray cluster."
        ),
    ] = "local",
    address: Address = None,
    world_size: Annotated[int, typer.Option(help="Shards per stage (--executor ray only).")] = 1,
    reuse_cache: ReuseCache = False,
) -> None:
    """Run a pipeline file stage by stage; a rerun resumes where it stopped and redoes stale stages."""
    from trajkit.pipeline import run_pipeline

    run_pipeline(pipeline, run, fresh, overrides or [], executor, address, world_size, reuse_cache)


@app.command()
def demo(
    run: RunDir = Path("runs/demo"),
    fresh: Annotated[bool, typer.Option("--fresh", help="Start over instead of resuming.")] = False,
    pipeline: Annotated[Path, typer.Option(help="Pipeline file to run.")] = DEMO_PIPELINE,
    overrides: Overrides = None,
    model: Annotated[
        str | None, typer.Option(help="Play every role with this model (Hub id or directory) instead of the warm-up.")
    ] = None,
    backend: Annotated[str, typer.Option(help="Backend for --model: transformers, vllm or openai.")] = "transformers",
    base_url: Annotated[str | None, typer.Option(help="Endpoint for --backend openai (e.g. vllm serve).")] = None,
    student: Annotated[
        str | None,
        typer.Option(
            help="smollm2 (SmolLM2-135M-Instruct, Q4_1) or a model directory: the fixture teaches, this model is the "
            "agent SFT and GRPO train, evaluated before SFT, after SFT and after GRPO (slow on a CPU)."
        ),
    ] = None,
    reuse_cache: ReuseCache = False,
) -> None:
    """Run the end-to-end demo pipeline (examples/demo.yaml) offline, then summarize it."""
    from trajkit.pipeline import run_pipeline

    if student:
        if model:
            raise _user("give --student or --model, not both")
        from trajkit.demo.student import run_student_demo

        run_student_demo(pipeline, run, student, fresh, overrides or [])
        return
    if model:
        from trajkit.demo.real import with_model

        pipeline = with_model(pipeline, run, model, backend, base_url)
    run_pipeline(pipeline, run, fresh=fresh, overrides=overrides or [], reuse_cache=reuse_cache)
    from trajkit.demo.summary import print_summary

    print_summary(run)


def _user(message: str) -> Exception:
    from trajkit.errors import UserError

    return UserError(message)


def _redacted(error: BaseException) -> str:
    """An error's text without the environment's secrets (it may quote a server's stderr; one raised in a
    stage was redacted with the stage's redactor on its way out); pyarrow stays out of ``--help``."""
    from trajkit.redact import Redactor, environment_secrets

    return Redactor(environment_secrets()).text(str(error))


def _lighter_teardown() -> None:
    """At exit, after the exit hooks the command added (Ray's disconnect, ...): finalize the garbage
    there is, then leave the objects still alive (modules, classes, caches: ~150,000 after a stage)
    out of the interpreter's teardown collections, which took 0.3-0.4 s of every command (0.37 s
    -> 0.14 s from a stage's end to the process's, `synth rollouts`). Python does not promise to
    finalize objects alive at exit; the standard streams are still flushed after this."""
    gc.collect()
    gc.freeze()


def main() -> None:
    """Entry point: user errors become one line and exit status 2."""
    from trajkit.confine.isolation import ProtectionMissing
    from trajkit.errors import StageStopped, UserError

    atexit.register(_lighter_teardown)
    if not sys.stdout.isatty():  # a pipe or a file: rich's 80 columns cut long option names in --help
        os.environ.setdefault("COLUMNS", "120")
    try:
        app()
    except (UserError, ProtectionMissing) as e:
        typer.echo(f"error: {_redacted(e)}", err=True)
        sys.exit(2)
    except StageStopped as e:
        typer.echo(f"stopped: {_redacted(e)}", err=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        typer.echo("interrupted; rerun the same command to resume", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
