"""`trajkit curate ...` sub-commands, generated from the stages' configs (see the README's flag table).

Options left unset fall back to ``--config`` YAML, then to the stage's defaults.
"""

from __future__ import annotations

from trajkit.clikit import stage_app, stage_command

app = stage_app()

stage_command(
    app,
    "curate.import",
    command="import",
    aliases={"path": ["-p"], "fields": ["--map"], "source_params": ["--source-param"]},
)
stage_command(
    app,
    "curate.verify",
    aliases={"model": ["--model-name"], "ks": ["--at"]},
)
stage_command(
    app,
    "curate.traces",
    aliases={"path": ["-p"]},
)
stage_command(
    app,
    "curate.passk",
    aliases={"ks": ["--at"], "sources": ["--source"]},
)
stage_command(
    app,
    "curate.dedup",
    renamed={"--reject-near": "--reject-near-duplicates", "--cluster-only": "--no-reject-near-duplicates"},
)
stage_command(
    app,
    "curate.decontaminate",
    aliases={"evals": ["--eval"], "fields": ["--field"]},
)
stage_command(
    app,
    "curate.filter",
    command="filter",
    aliases={"model": ["--model-name"], "difficulties": ["--difficulty"]},
)
stage_command(app, "curate.split")
stage_command(
    app,
    "curate.curriculum",
    aliases={"hard_phases": ["--phase"]},
)
