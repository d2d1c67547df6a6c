"""A two-stage GRPO curriculum on the tiny model, through ``trajkit train grpo``, on CPU."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from typer.testing import CliRunner

from tests.train import helpers
from trajkit.cli import app
from trajkit.store import Store

STAGES = {
    "model": None,
    "defaults": {
        "rewards": [{"name": "correctness"}, {"name": "format", "weight": 0.1}],
        "grpo": {
            "per_device_train_batch_size": 8,
            "max_completion_length": 8,
            "learning_rate": 5.0e-3,
            "seed": 0,
        },
    },
    "stages": [
        {"name": "broad", "data": {"stage": "broad"}, "steps": 2},
        {
            "name": "hard",
            "data": {"stage": "hard", "difficulty": ["hard", "medium"]},
            "steps": 2,
            "grpo": {"temperature": 1.2},
        },
    ],
}


def _params(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture
def curated_run(run_dir):
    tasks = [helpers.even_task(i) for i in range(6)]
    math = {
        "task_id": "math-1",
        "question": "What is 2 + 2?",
        "mode": "imported",
        "verifier": {"kind": "math", "spec": json.dumps({"answer": "4"})},
    }
    stage = {t["task_id"]: ("broad" if i < 3 else "hard") for i, t in enumerate(tasks)} | {"math-1": "hard"}
    difficulty = {"even-05": "easy", "math-1": "hard"}  # even-05 is filtered out of stage hard
    helpers.write_curated(run_dir, tasks + [math], stage, difficulty)
    return run_dir


def test_two_stage_curriculum(curated_run, tiny_model_dir, tmp_path, monkeypatch):
    from trajkit.train import weights
    from trajkit.verify import Sandbox
    from trajkit.verify import sandbox as sandbox_module

    # a fresh process-wide pool, so its start is seen whichever tests ran before
    monkeypatch.setattr(sandbox_module, "_defaults", {})
    events: list[tuple] = []
    load_model = weights.load_model

    def spy_load(path, dtype=None):
        model = load_model(path, dtype)
        events.append(("load", path, _params(model)))
        return model

    start = Sandbox.start

    def spy_start(self):
        events.append(("sandbox", torch.cuda.is_initialized()))
        return start(self)

    monkeypatch.setattr(weights, "load_model", spy_load)
    monkeypatch.setattr(Sandbox, "start", spy_start)
    helpers.CALLS.clear()
    stages = tmp_path / "stages.yaml"
    stages.write_text(yaml.safe_dump({**STAGES, "model": str(tiny_model_dir)}))

    result = CliRunner().invoke(app, ["train", "grpo", "--config", str(stages), "--run", str(curated_run)])
    assert result.exit_code == 0, result.output + repr(result.exception)

    store = Store(curated_run)
    models = curated_run / "models"
    assert (models / "grpo-broad" / "model.safetensors").is_file() and (
        models / "grpo-hard" / "model.safetensors"
    ).is_file()
    loads = [e for e in events if e[0] == "load"]
    assert [e[1] for e in loads] == [str(tiny_model_dir), str(models / "grpo-broad")]
    base, stage1_start = load_model(str(tiny_model_dir)), loads[0][2]
    stage1, stage2 = _params(load_model(str(models / "grpo-broad"))), _params(load_model(str(models / "grpo-hard")))
    assert _same(stage1_start, _params(base))
    assert not _same(stage1, stage1_start)  # stage 1 trained
    assert _same(loads[1][2], stage1)  # stage 2 started from stage 1's saved weights
    assert not _same(stage2, stage1)  # and trained further
    assert store.stage_config("grpo-hard")["config"]["model"] == str(models / "grpo-broad")

    # the sandbox (stage hard has a math task) started before the model loaded, CUDA untouched
    hard = events[events.index(loads[1]) - 1]
    assert hard[0] == "sandbox" and hard[1] is False

    # rewards came from the verifier: one custom-verifier call per completion, and the logged
    # pass rate is what the verifier said
    rows = sorted(store.rows("train_metrics"), key=lambda r: (r["stage"], r["step"]))
    assert [(r["stage"], r["step"]) for r in rows] == [
        ("grpo-broad", 1),
        ("grpo-broad", 2),
        ("grpo-hard", 1),
        ("grpo-hard", 2),
    ]
    broad_calls = helpers.CALLS[:16]  # 2 steps x 2 prompts x 4 generations (rollouts_per_prompt)
    broad = [r for r in rows if r["stage"] == "grpo-broad"]
    assert [r["pass_rate"] for r in broad] == [
        pytest.approx(sum(ok for _, ok in broad_calls[:8]) / 8),
        pytest.approx(sum(ok for _, ok in broad_calls[8:]) / 8),
    ]
    assert 16 < len(helpers.CALLS) < 32  # stage hard: its math task's completions go to math-verify instead
    # the verifier-based reward varied within a group: non-zero advantages
    assert min(r["zero_variance_groups"] for r in rows) < 1.0
    assert max(r["reward_std"] for r in rows) > 0.0
    for r in rows:
        assert r["reward_mean"] is not None and r["completion_length"] is not None and r["loss"] is not None
        assert r["staleness"] == 0 and r["clip_fraction"] is not None and r["tokens_per_s"] > 0
        assert "rewards/correctness_reward/mean" in json.loads(r["metrics"])
    assert (curated_run / "plots" / "grpo-broad.png").is_file() and (curated_run / "plots" / "grpo-hard.png").is_file()
    manifest = store.manifest("grpo-hard")
    assert manifest["counts"]["tasks"] == 3  # even-03, even-04 and math-1; even-05 is easy
    assert manifest["summary"]["grpo"]["epsilon_high"] == 0.28 and manifest["summary"]["grpo"]["loss_type"] == "dapo"
    assert manifest["summary"]["grpo"]["temperature"] == 1.2

    # a rerun skips both completed stages
    again = CliRunner().invoke(app, ["train", "grpo", "--config", str(stages), "--run", str(curated_run)])
    assert again.exit_code == 0
    assert store.count("train_metrics") == 4 and len([e for e in events if e[0] == "load"]) == 2
    for pool in sandbox_module._defaults.values():
        pool.close()


def test_a_stage_with_fewer_tasks_than_a_generation_batch_still_trains(curated_run, tiny_model_dir, tmp_path):
    one = {
        "name": "one",
        "data": {"stage": "hard", "difficulty": ["hard"]},
        "steps": 2,
        "generation_steps": 2,
        "grpo": {"num_generations": 4},
    }
    stages = tmp_path / "one.yaml"
    stages.write_text(yaml.safe_dump({**STAGES, "model": str(tiny_model_dir), "stages": [one]}))
    result = CliRunner().invoke(app, ["train", "grpo", "--config", str(stages), "--run", str(curated_run)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    store = Store(curated_run)
    assert store.manifest("grpo-one")["counts"]["tasks"] == 1  # math-1 alone; a batch of 2 steps x 8 holds 4 prompts
    assert [r["step"] for r in store.rows("train_metrics")] == [1, 2]


def test_generation_steps_batch_the_steps_and_keep_completions_per_step(tmp_path):
    from trajkit.train.grpo import GRPOStageConfig, grpo_args

    grpo = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 4, "num_generations": 4}
    cfg = GRPOStageConfig(model="m", steps=8, generation_steps=4, grpo=grpo)
    args = grpo_args(cfg, str(tmp_path), [1.0], None)
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (16, 1)
    assert (args.steps_per_generation, args.generation_batch_size) == (4, 64)
    assert not args.gradient_checkpointing
    kept = GRPOStageConfig(model="m", steps=8, generation_steps=2, grpo={**grpo, "gradient_checkpointing": True})
    assert grpo_args(kept, str(tmp_path), [1.0], None).gradient_checkpointing  # the user's choice wins
    plain = grpo_args(GRPOStageConfig(model="m", steps=8, grpo=grpo), str(tmp_path), [1.0], None)
    assert (plain.per_device_train_batch_size, plain.gradient_accumulation_steps, plain.steps_per_generation) == (
        4,
        4,
        4,
    )


def test_metrics_record_staleness_clip_fraction_and_tokens_per_second():
    from types import SimpleNamespace

    from trajkit.train.metrics import make_callback

    rows: list[dict] = []
    callback = make_callback("s", rows)
    args = SimpleNamespace(generation_batch_size=16)
    state = SimpleNamespace(is_world_process_zero=True, global_step=0)
    callback.on_train_begin(args, state, None)
    for step in range(1, 5):  # one generation serves two steps: steps 1 and 3 generated
        state.global_step = step
        logs = {"loss": 0.1, "clip_ratio/region_mean": 0.25 * step}
        if step % 2:
            logs.update(reward=1.0, **{"completions/mean_length": 10.0})
        callback.on_log(args, state, None, logs=logs)
    assert [r["staleness"] for r in rows] == [0, 1, 0, 1]
    assert [r["clip_fraction"] for r in rows] == [0.25, 0.5, 0.75, 1.0]
    assert rows[1]["tokens_per_s"] > 0 and rows[-1]["tokens_per_s"] >= rows[1]["tokens_per_s"]
