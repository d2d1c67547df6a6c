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


class _Nothing(StageConfig):
    pass


def _label(ctx, cfg) -> dict:
    """Reads every task (and the rejects) and labels the tasks not rejected as train."""
    rejected = ctx.store.rejected("tasks")
    ctx.write("splits", [{"task_id": t, "split": "train"} for t in sorted(ctx.store.ids("tasks")) if t not in rejected])
    return {}


LABEL = StageSpec("test.label", _Nothing, _label, outputs=("splits",), help="labels every task train")


def test_stale_is_never_complete(run_dir, tmp_path):
    """A stage whose input changed since it ran (a stage it read redone, a recording that grew) is refused in
    one line naming the input and the ways on; --redo-stale and pipelines redo it (issue 34 item 5)."""
    from tests.toy_stage import TOY, ToyConfig, toy_rows
    from trajkit.pipeline import run_pipeline

    store = Store(run_dir, create=True)
    run_stage(store, TOY, ToyConfig(n=4, shard_rows=2), quiet=True)
    run_stage(store, LABEL, _Nothing(), name="label", quiet=True)
    assert run_stage(store, LABEL, _Nothing(), name="label", quiet=True)["outputs"] == {"splits": 4}
    store.write("tasks", "toy", toy_rows(6)[4:])  # a recorder appends to the stage it records into
    with pytest.raises(UserError, match="stage 'label' is stale: its input tasks from stage 'toy' changed"):
        run_stage(store, LABEL, _Nothing(), name="label", quiet=True)
    assert run_stage(store, LABEL, _Nothing(), name="label", quiet=True, redo_stale=True)["outputs"] == {"splits": 6}
    # rejects are inputs too: a stage that rejects rows redone since
    store.write(
        "rejected",
        "check",
        [
            {
                "reject_id": "r",
                "row_id": toy_rows(1)[0]["task_id"],
                "table_name": "tasks",
                "stage": "check",
                "reason": "x",
            }
        ],
    )
    assert run_stage(store, LABEL, _Nothing(), name="label", quiet=True, fresh=True)["outputs"] == {"splits": 5}
    store.drop_stage("check")
    with pytest.raises(UserError, match="its input rejected from stage 'check' changed"):
        run_stage(store, LABEL, _Nothing(), name="label", quiet=True)
    # a pipeline redoes a stale stage itself
    run_stage(store, TOY, ToyConfig(n=3, shard_rows=2), quiet=True, fresh=True)
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text("stages:\n  - {stage: 'tests.test_resume_config:LABEL', name: label}\n")
    run_pipeline(pipeline, run_dir)
    assert Store(run_dir).count("splits") == 3


def _from_log(ctx, cfg) -> dict:
    """Reads a log a recorder appends to (as ``curate traces`` reads the recording proxy's) into tasks."""
    log = ctx.store.root / "calls.log"
    ctx.store.note_input(log)
    lines = log.read_text().splitlines()
    ctx.write("tasks", [{"task_id": content_id("log", q), "mode": "imported", "question": q} for q in lines])
    return {}


FROM_LOG = StageSpec("test.from_log", _Nothing, _from_log, outputs=("tasks",), help="tasks from a log")


def test_a_stage_that_read_a_recording_is_stale_once_it_grew(run_dir):
    store = Store(run_dir, create=True)
    (run_dir / "calls.log").write_text("q1\n")
    assert run_stage(store, FROM_LOG, _Nothing(), quiet=True)["outputs"] == {"tasks": 1}
    assert run_stage(store, FROM_LOG, _Nothing(), quiet=True)["outputs"] == {"tasks": 1}  # unchanged: complete
    with (run_dir / "calls.log").open("a") as f:
        f.write("q2\n")
    with pytest.raises(UserError, match="stage 'from_log' is stale: its input file calls.log changed"):
        run_stage(store, FROM_LOG, _Nothing(), quiet=True)
    assert run_stage(store, FROM_LOG, _Nothing(), quiet=True, redo_stale=True)["outputs"] == {"tasks": 2}
