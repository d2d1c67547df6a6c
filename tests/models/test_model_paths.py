"""A run names its local model so that it is found from anywhere: the stored path is absolute."""

from __future__ import annotations

import os

from typer.testing import CliRunner

from tests.fixtures.synth import with_servers
from trajkit.cli import app
from trajkit.models.base import ModelSpec, model_path
from trajkit.store import Store


def test_a_local_model_given_relative_is_kept_absolute_and_hub_ids_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    assert ModelSpec(model="models/tiny").model == str(tmp_path / "models" / "tiny")  # an existing directory
    assert model_path("runs/x/models/sft") == str(tmp_path / "runs/x/models/sft")  # not yet made: no Hub id
    assert model_path("./mine") == str(tmp_path / "mine") and model_path("~") == os.path.expanduser("~")
    assert model_path("Qwen/Qwen3-1.7B") == "Qwen/Qwen3-1.7B" and model_path("gpt2") == "gpt2"
    served = ModelSpec(model="models/tiny", backend="openai", base_url="http://127.0.0.1:8000/v1")
    assert served.model == "models/tiny"  # the name an endpoint serves


def test_a_run_made_with_a_relative_model_path_shows_its_tokens_from_another_folder(
    tmp_path, monkeypatch, calculator_rows, tiny_model_dir
):
    """Rollouts run in the model's parent folder with ``--model <its name>``; the viewer's token trace, opened
    from elsewhere, decodes the tokens with the model's own tokenizer."""
    from trajkit.view.pages import token_trace

    run = with_servers(tmp_path / "run", calculator_rows)
    task = {"task_id": "t", "question": "Add 1 and 2.", "mode": "single_tool", "target_tools": ["add"]}
    Store(run).write("tasks", "import", [{**task, "server_ids": [calculator_rows[0]["server_id"]]}])
    monkeypatch.chdir(tiny_model_dir.parent)
    args = ["synth", "rollouts", "-r", str(run), "--model", tiny_model_dir.name, "--backend", "transformers"]
    args += ["--set", "model.device=cpu", "--max-tokens", "8", "--max-turns", "1"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    [row] = Store(run).rows("trajectories")
    assert row["model"] == str(tiny_model_dir) and row["token_ids"]
    trace = token_trace(row)
    assert trace["decoded"] and trace["total"] == len(row["token_ids"])
