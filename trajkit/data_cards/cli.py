"""`trajkit card` and `trajkit push`: two plain commands that trajkit/cli.py registers at the top level."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trajkit.clikit import ConfigFile, Name, Overrides

RunExisting = Annotated[Path, typer.Option("--run", "-r", help="Run directory.")]


def card(
    run: RunExisting,
    pretty_name: Annotated[
        str | None, typer.Option("--title", help="Title of the card (default: the run's name).")
    ] = None,
    license_: Annotated[str | None, typer.Option("--license", help="Hub license id (default: unknown).")] = None,
    tags: Annotated[list[str] | None, typer.Option("--tag", help="Extra tag; repeatable.")] = None,
    repo_id: Annotated[str | None, typer.Option("--repo", help="user/name, for the loading snippet.")] = None,
    examples: Annotated[int | None, typer.Option(help="Example trajectories rendered as conversations.")] = None,
    config: ConfigFile = None,
    overrides: Overrides = None,
    name: Name = None,
) -> None:
    """Render RUN/card/README.md (a Hugging Face dataset card) and RUN/card/plots/*.png from the run's tables."""
    from trajkit.clikit import run_command
    from trajkit.store import existing_run

    existing_run(run)  # a card describes a run: it never makes one
    options = {"pretty_name": pretty_name, "license": license_, "tags": tags, "repo_id": repo_id, "examples": examples}
    # The card describes the run as it is now, so it is always rendered afresh; the stage says what it wrote.
    run_command("card", run, options, config=config, overrides=overrides, name=name, fresh=True)


def push(
    run: RunExisting,
    repo: Annotated[str, typer.Option("--repo", help="Hub dataset repository, user/name.")],
    private: Annotated[bool, typer.Option("--private", help="Create the repository as private.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List the files and sizes; upload nothing.")] = False,
    endpoint: Annotated[str | None, typer.Option(help="Hub endpoint (default: HF_ENDPOINT or huggingface.co).")] = None,
    revision: Annotated[str | None, typer.Option(help="Branch to commit to (default: main).")] = None,
    message: Annotated[str | None, typer.Option("--message", "-m", help="Commit message.")] = None,
    files_per_commit: Annotated[
        int, typer.Option(help="Files per commit; larger runs go up in several commits.")
    ] = 100,
) -> None:
    """Upload the card, plots and shards to the Hub (token from HF_TOKEN or `hf auth login`, never printed).

    Refuses if the card or any shard holds something that looks like a secret.
    An interrupted push resumes when rerun.
    """
    from trajkit.data_cards.push import push as do_push

    result = do_push(
        run,
        repo,
        private=private,
        dry_run=dry_run,
        endpoint=endpoint,
        revision=revision,
        commit_message=message,
        files_per_commit=files_per_commit,
        echo=typer.echo,
    )
    if not result.dry_run:
        typer.echo(f"pushed {len(result.files)} files in {result.commits} commit(s) to {result.url}")
