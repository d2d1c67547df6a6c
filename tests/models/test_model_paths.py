"""A run names its local model so that it is found from anywhere: the stored path is absolute."""

from __future__ import annotations

import os

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
    tmp_path, monkeypatch, tiny_model_dir
):
    """A stage's config is built in the model's parent folder from ``--model <its name>``; the trajectory row
    names the model as the stage's backend does (``spec.model``); the viewer's token trace of the run, opened
    from elsewhere, decodes the tokens with the model's own tokenizer."""
    from trajkit.config import build
    from trajkit.stages import get_stage
    from trajkit.view.pages import token_trace

    monkeypatch.chdir(tiny_model_dir.parent)
    spec = get_stage("synth.rollouts").config
    cfg = build(spec, {"model": {"model": tiny_model_dir.name, "backend": "transformers"}})
    run = tmp_path / "run"
    row = {"traj_id": "a", "task_id": "t", "status": "completed", "model": cfg.model.model, "token_ids": [1, 2, 3]}
    Store(run, create=True).write("trajectories", "rollouts", [row])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    [stored] = Store(run).rows("trajectories")
    assert stored["model"] == str(tiny_model_dir)
    trace = token_trace(stored)
    assert trace["decoded"] and trace["total"] == 3
