"""`trajkit train ...` sub-commands: SFT on trajectories, GRPO through curriculum stages."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trajkit.clikit import ConfigFile, Fresh, Name, Overrides, RunDir

app = typer.Typer(no_args_is_help=True)

AccelerateConfig = Annotated[
    str | None,
    typer.Option(
        "--accelerate-config",
        help="Launch through `accelerate launch` with this config: fsdp2, ddp (shipped) or a file path.",
    ),
]
NumProcesses = Annotated[
    int | None, typer.Option("--num-processes", min=1, help="Processes for --accelerate-config (one per GPU).")
]


def _relaunch(accelerate_config: str, num_processes: int | None, args: list[str]) -> None:
    from trajkit.train.launch import launch

    code = launch(accelerate_config, args, num_processes)
    if code:
        raise typer.Exit(code)


def _common(run: Path, overrides: list[str] | None, fresh: bool) -> list[str]:
    args = ["--run", str(run)]
    for item in overrides or []:
        args += ["--set", item]
    return args + (["--fresh"] if fresh else [])


@app.command()
def sft(
    run: RunDir,
    model: Annotated[str | None, typer.Option(help="Starting weights: a model directory or Hub id.")] = None,
    config: ConfigFile = None,
    source: Annotated[str | None, typer.Option(help="auto (tokens where stored), tokens or messages.")] = None,
    output_dir: Annotated[Path | None, typer.Option("--output-dir", help="Default: RUN/models/sft.")] = None,
    overrides: Overrides = None,
    name: Name = None,
    fresh: Fresh = False,
    accelerate_config: AccelerateConfig = None,
    num_processes: NumProcesses = None,
) -> None:
    """SFT with TRL on the run's accepted trajectories; weights to RUN/models/sft/."""
    from trajkit.train.launch import launched

    if accelerate_config and not launched():
        args = ["train", "sft", *_common(run, overrides, fresh)]
        for flag, value in (
            ("--model", model),
            ("--config", config),
            ("--source", source),
            ("--output-dir", output_dir),
            ("--name", name),
        ):
            if value is not None:
                args += [flag, str(value)]
        _relaunch(accelerate_config, num_processes, args)
        return
    from trajkit.config import build, given_options, read_yaml
    from trajkit.stages import get_stage
    from trajkit.store import Store
    from trajkit.train.launch import run_on_every_rank

    spec = get_stage("train.sft")
    options = {"model": model, "source": source, "output_dir": str(output_dir) if output_dir else None}
    from_file = read_yaml(config) if config else {}
    cfg = build(spec.config, from_file, given_options(options), overrides=overrides or [], where="train.sft")
    run_on_every_rank(Store(run, create=True), spec, cfg, name or "sft", fresh)


@app.command()
def grpo(
    config: Annotated[Path, typer.Option("--config", "-c", help="Curriculum YAML: model, defaults, stages.")],
    run: RunDir,
    overrides: Annotated[
        list[str] | None, typer.Option("--set", help="STAGE.key=value (or *.key=value for all stages); repeatable.")
    ] = None,
    fresh: Fresh = False,
    accelerate_config: AccelerateConfig = None,
    num_processes: NumProcesses = None,
) -> None:
    """GRPO with TRL through the curriculum's stages (each resumable, named grpo-<stage>)."""
    from trajkit.train.launch import launched

    if accelerate_config and not launched():
        _relaunch(
            accelerate_config,
            num_processes,
            ["train", "grpo", "--config", str(config), *_common(run, overrides, fresh)],
        )
        return
    from trajkit.train.curriculum import run_curriculum

    run_curriculum(config, run, overrides or [], fresh=fresh)
