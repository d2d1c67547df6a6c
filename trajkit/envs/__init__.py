"""trajkit.envs: MCP servers as environments, and the one agent loop every stage runs.

* ``config``     — the ``mcpServers`` JSON format (stdio command/args/env, HTTP url/headers).
* ``session``    — one MCP connection (a server process or HTTP session): timeouts, truncation, faults.
* ``discovery``  — harvest: start, initialize, list tools (all pages), describe as ``servers`` rows.
* ``tools``      — harvested tools -> the OpenAI tool schemas a model sees, and the routes back.
* ``env``        — ``ToolEnv``: fresh processes per trajectory or pools, bounded; ``Episode`` sessions.
* ``agent``      — ``run_episode`` (model <-> tools) -> a ``trajectories`` row; custom rollouts.
* ``solve``      — ``attempt``: one try at any task, for pass@k, evaluation and training.
* ``servers/``   — the project's example servers (calculator, kv, units).

Nothing here imports the ``mcp`` SDK until a server is started.
"""
