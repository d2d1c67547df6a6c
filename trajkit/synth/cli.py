"""`trajkit synth ...` sub-commands, generated from the stages' configs (see the README's flag table)."""

from __future__ import annotations

from trajkit.clikit import stage_app, stage_command

app = stage_app()

stage_command(
    app,
    "synth.harvest",
    aliases={"servers": ["-s"], "startup_timeout_s": ["--startup-timeout"]},
)
stage_command(
    app,
    "synth.tasks",
    aliases={"requests_per_mode": ["--requests"], "modes": ["--mode"], "servers": ["--server"]},
)
stage_command(
    app,
    "synth.rollouts",
    aliases={"rollouts_per_task": ["--n"]},
)
stage_command(
    app,
    "synth.judge",
    aliases={"targets": ["--target"]},
)
stage_command(
    app,
    "synth.filter",
    aliases={"rules": ["--rule"]},
)
stage_command(app, "synth.extend")
