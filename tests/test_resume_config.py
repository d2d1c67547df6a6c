"""Resume survives transport changes; a refused resume names each differing field; no pin without rows."""

from __future__ import annotations

import json

import pytest
from pydantic import Field

from trajkit.config import StageConfig, Unhashed
from trajkit.errors import UserError
from trajkit.models.base import ModelSpec
from trajkit.runner import StageSpec, run_stage
from trajkit.schema import content_id
from trajkit.store import Store


class GenConfig(StageConfig):
    model: ModelSpec
    n: int = 3
    fail_first: Unhashed[bool] = Field(False)


def run_gen(ctx, cfg: GenConfig) -> dict:
    if cfg.fail_first:
        raise UserError("missing option --questions")
    done = ctx.done("tasks")
    ctx.write(
        "tasks",
        [
            {"task_id": content_id("gen", i), "mode": "imported", "question": f"q{i}"}
            for i in range(cfg.n)
            if content_id("gen", i) not in done
        ],
    )
    return {}


GEN = StageSpec("test.gen", GenConfig, run_gen, outputs=("tasks",), help="writes n tasks")


def _cfg(**model) -> GenConfig:
    return GenConfig(model=ModelSpec(model="m", backend="openai", **model))


def test_moved_endpoint_resumes_and_real_changes_are_named(run_dir):
    store = Store(run_dir)
    run_stage(store, GEN, _cfg(base_url="http://127.0.0.1:8000/v1"), quiet=True)
    (store.stage_dir("gen") / "_manifest.json").unlink()  # as if it was interrupted
    moved = _cfg(base_url="http://localhost:9000/v1", api_key_env="OTHER", timeout_s=5, max_concurrency=2)
    run_stage(store, GEN, moved, quiet=True)
    assert store.count("tasks") == 3
    with pytest.raises(UserError) as e:
        run_stage(store, GEN, GenConfig(model=ModelSpec(model="m2", backend="openai"), n=4))
    msg = str(e.value)
    assert 'model.model: "m" -> "m2"' in msg and "n: 3 -> 4" in msg and "--fresh" in msg


def test_run_made_before_the_endpoint_left_the_hash_still_resumes(run_dir):
    store = Store(run_dir)
    run_stage(store, GEN, _cfg(), quiet=True)
    (store.stage_dir("gen") / "_manifest.json").unlink()
    path = store.stage_dir("gen") / "_config.json"
    old = json.loads(path.read_text())
    old["config"]["model"]["base_url"] = "http://old-host:8000/v1"
    old["config_hash"] = "0123456789abcdef"
    path.write_text(json.dumps(old))
    run_stage(store, GEN, _cfg(base_url="http://new-host/v1"), quiet=True)
    assert json.loads(path.read_text())["config_hash"] != "0123456789abcdef"
    assert store.count("tasks") == 3


def test_a_stage_that_wrote_nothing_pins_no_config(run_dir):
    store = Store(run_dir)
    bad = GenConfig(model=ModelSpec(model="m"), n=9, fail_first=True)
    with pytest.raises(UserError, match="missing option"):
        run_stage(store, GEN, bad, quiet=True)
    assert store.stage_config("gen") is None
    run_stage(store, GEN, GenConfig(model=ModelSpec(model="m"), n=2), quiet=True)
    assert store.count("tasks") == 2


def test_manifests_keep_endpoints_without_credentials(run_dir):
    store = Store(run_dir)
    manifest = run_stage(store, GEN, _cfg(base_url="https://user:pw@api.example.com/v1?key=abc"), quiet=True)
    assert manifest["config"]["model"]["base_url"] == "https://api.example.com/v1"
    assert "pw" not in (store.stage_dir("gen") / "_manifest.json").read_text()
    assert "pw" not in (store.stage_dir("gen") / "_config.json").read_text()


def test_differences_of_a_list_of_models_are_named_item_by_item():
    from trajkit.config import config_differences

    one = {"models": [{"model": "a", "backend": "openai"}], "split": "train", "ks": [1, 2]}
    other = {"models": [{"model": "b", "backend": "openai"}], "split": "held_out", "ks": [1, 4]}
    assert config_differences(one, other) == [
        "ks: [1, 2] -> [1, 4]",
        'models.0.model: "a" -> "b"',
        'split: "train" -> "held_out"',
    ]
    two = {**one, "models": [{"model": "a"}, {"model": "c"}]}  # another number of models: the lists whole
    assert config_differences(one, two) == [
        'models: [{"model": "a", "backend": "openai"}] -> [{"model": "a"}, {"model": "c"}]'
    ]
