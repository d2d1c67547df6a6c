"""`trajkit synth tasks|rollouts|judge|filter|extend`: options reach the stage configs; bad input exits 2."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tests.synth.brain import Brain
from trajkit.cli import app
from trajkit.errors import UserError
from trajkit.models.scripted_server import ScriptedServer
from trajkit.store import Store


def _invoke(*args: str):
    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.output
    return result


def test_stage_commands_pass_their_options(synth_run):
    with ScriptedServer(Brain(garbage=0)) as server:
        model = ["--model", "scripted", "--backend", "openai", "--base-url", server.base_url]
        _invoke(
            "synth",
            "tasks",
            "--run",
            synth_run,
            *model,
            "--method",
            "vs_multi",
            "--k",
            3,
            "--m",
            2,
            "--tail",
            0.2,
            "--mode",
            "single_tool",
            "--requests",
            2,
            "--sampling",
            "list",
            "--server",
            "calculator",
            "--set",
            "model.max_retries=0",
        )
        _invoke("synth", "rollouts", "--run", synth_run, *model, "--n", 1, "--max-turns", 3, "--set", "pool_size=1")
        _invoke("synth", "judge", "--run", synth_run, *model, "--target", "trajectories", "--seed", 11)
        _invoke("synth", "filter", "--run", synth_run, "--rule", "no_tool_call", "--min-tool-accuracy", 1.0)
    store = Store(synth_run)
    tasks_cfg = store.manifest("tasks")["config"]
    assert (tasks_cfg["method"], tasks_cfg["k"], tasks_cfg["m"], tasks_cfg["tail"]) == ("vs_multi", 3, 2, 0.2)
    assert tasks_cfg["modes"] == ["single_tool"] and tasks_cfg["servers"] == ["calculator"]
    assert tasks_cfg["model"]["base_url"] == server.base_url and tasks_cfg["model"]["max_retries"] == 0
    assert store.count("tasks") == 6 and store.count("trajectories") == store.count("trajectory_quality") > 0
    assert store.count("task_quality") == 0  # --target trajectories only
    assert store.manifest("rollouts")["config"]["max_turns"] == 3
    assert store.manifest("judge")["config"]["seed"] == 11
    assert store.manifest("filter")["config"]["rules"] == ["no_tool_call"]


def test_bad_options_are_user_errors(synth_run):
    with pytest.raises(UserError, match="method"):
        _invoke("synth", "tasks", "--run", synth_run, "--model", "m", "--method", "vs_best")
    with pytest.raises(UserError, match="unknown rule"):
        _invoke("synth", "filter", "--run", synth_run, "--rule", "no_such_rule")
