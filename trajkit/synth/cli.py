"""`trajkit synth ...` sub-commands, generated from the stages' configs (see the README's flag table)."""

from __future__ import annotations

from trajkit.clikit import stage_app, stage_command

app = stage_app()

stage_command(
    app,
    "synth.harvest",
    "Start each MCP server, list its tools, and write the `servers` table (failed servers with a reason).",
    aliases={"servers": ["-s"], "startup_timeout_s": ["--startup-timeout"]},
)
stage_command(
    app,
    "synth.tasks",
    "Synthesize tool-use tasks from the `servers` table, with direct or verbalized sampling.",
    aliases={"requests_per_mode": ["--requests"], "modes": ["--mode"], "servers": ["--server"]},
)
stage_command(
    app,
    "synth.rollouts",
    "Run the agent loop over tasks against the harvested MCP servers; write `trajectories`.",
    aliases={"rollouts_per_task": ["--n"]},
)
stage_command(
    app,
    "synth.judge",
    "LLM-judge tasks (Toucan's six dimensions) and trajectories (completeness, conciseness, tool accuracy).",
    aliases={"targets": ["--target"]},
)
stage_command(
    app,
    "synth.filter",
    "Reject trajectories by rules and judge thresholds; reasons counted, rows kept.",
    aliases={"rules": ["--rule"]},
)
stage_command(
    app,
    "synth.extend",
    "Extend conversations: a user simulator writes a follow-up, the agent loop continues.",
)
