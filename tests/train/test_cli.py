"""The train commands' edges: one-line errors, config validation, accelerate launch, imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tests.train import helpers
from trajkit.cli import app
from trajkit.errors import UserError

ROOT = Path(__file__).resolve().parents[2]


def _stages(tmp_path: Path, **grpo) -> Path:
    path = tmp_path / "stages.yaml"
    path.write_text(yaml.safe_dump({"model": "unused", "stages": [{"name": "a", "steps": 1, "grpo": grpo}]}))
    return path


def test_vllm_without_the_extra_fails_with_one_line(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trajkit.cli",
            "train",
            "grpo",
            "--config",
            str(_stages(tmp_path, use_vllm=True)),
            "--run",
            str(tmp_path / "run"),
        ],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "vllm" in lines[0], done.stderr


def test_every_problem_of_a_curriculum_is_reported_at_once(tmp_path):
    from trajkit.train.curriculum import load_curriculum

    path = tmp_path / "stages.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "model": "m",
                "stages": [
                    {"name": "a", "steps": 1, "grpo": {"num_generation": 4}},
                    {"name": "b", "data": {"difficulty": ["impossible"]}},
                    {"steps": 2},
                    {"name": "c", "steps": 1, "grpo": {"max_steps": 3}},
                ],
            }
        )
    )
    with pytest.raises(UserError) as err:
        load_curriculum(path, tmp_path / "run")
    msg = str(err.value)
    assert "4 problem(s)" in msg
    assert "num_generation: not a GRPOConfig field" in msg
    assert "stage 'b'" in msg and "steps" in msg and "difficulty" in msg
    assert "stages[2]: needs a 'name'" in msg
    assert "max_steps: set by the stage" in msg


def test_curriculum_chains_stages_and_applies_overrides(tmp_path):
    from trajkit.train.curriculum import load_curriculum

    path = tmp_path / "stages.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "model": "${run}/models/sft",
                "defaults": {"grpo": {"temperature": 0.9}, "steps": 5},
                "stages": [{"name": "a"}, {"name": "b", "grpo": {"temperature": 0.5}}],
            }
        )
    )
    plan = load_curriculum(path, tmp_path / "run", overrides=["b.steps=7", "*.grpo.top_p=0.9"])
    (na, a), (nb, b) = plan
    assert (na, nb) == ("grpo-a", "grpo-b")
    assert a.model == str(tmp_path / "run" / "models" / "sft") and b.model == str(
        tmp_path / "run" / "models" / "grpo-a"
    )
    assert (a.steps, b.steps) == (5, 7)
    assert a.grpo == {"temperature": 0.9, "top_p": 0.9} and b.grpo == {"temperature": 0.5, "top_p": 0.9}


def test_shipped_accelerate_configs_parse_and_launch_relaunches(tmp_path, monkeypatch):
    from accelerate.commands.config.config_args import load_config_from_file

    from trajkit.train import launch

    fsdp = load_config_from_file(str(launch.config_path("fsdp2")))
    assert fsdp.distributed_type == "FSDP" and fsdp.fsdp_config["fsdp_version"] == 2
    assert fsdp.fsdp_config["fsdp_state_dict_type"] == "FULL_STATE_DICT"
    assert load_config_from_file(str(launch.config_path("ddp"))).distributed_type == "MULTI_GPU"
    with pytest.raises(UserError, match="neither a shipped config"):
        launch.config_path("fsdp3")

    calls = []
    monkeypatch.setattr(launch.subprocess, "call", lambda cmd, env: calls.append((cmd, env)) or 0)
    monkeypatch.delenv(launch.LAUNCHED, raising=False)
    stages = _stages(tmp_path)
    args = [
        "train",
        "grpo",
        "--config",
        str(stages),
        "--run",
        str(tmp_path / "run"),
        "--accelerate-config",
        "fsdp2",
        "--num-processes",
        "2",
        "--set",
        "a.steps=3",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    ((cmd, env),) = calls
    assert cmd[:6] == [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(launch.CONFIG_DIR / "fsdp2.yaml"),
        "--num_processes",
    ]
    assert cmd[6:] == [
        "2",
        "-m",
        "trajkit.cli",
        "train",
        "grpo",
        "--config",
        str(stages),
        "--run",
        str(tmp_path / "run"),
        "--set",
        "a.steps=3",
    ]
    assert env[launch.LAUNCHED] == "1"


def test_train_reads_runs_without_polars(run_dir):
    """The GPU image has no polars (duckdb travels in `make gpu-bundle`)."""
    helpers.write_curated(run_dir, [helpers.even_task(0)], {"even-00": "broad"})
    code = (
        "import sys\n"
        "from trajkit.store import Store\n"
        "import trajkit.train.cli, trajkit.train.grpo, trajkit.train.sft, trajkit.train.curriculum, trajkit.train.rewards\n"
        "import trajkit.train.tools, trajkit.train.metrics, trajkit.train.weights\n"
        "from trajkit.envs.solve import grpo_rows\n"
        "from trajkit.train.data import DataFilter, sft_rows, task_rows\n"
        f"store = Store({str(run_dir)!r})\n"
        "rows = grpo_rows(task_rows(store, DataFilter(stage='broad')))\n"
        "assert [r['task_id'] for r in rows] == ['even-00'] and rows[0]['difficulty'] == 'medium', rows\n"
        "sft_rows(store)\n"
        "assert 'polars' not in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_example_curriculum_is_valid(tmp_path):
    from trajkit.train.curriculum import load_curriculum

    plan = load_curriculum(ROOT / "examples" / "stages.yaml", tmp_path / "run")
    assert [name for name, _ in plan] == ["grpo-broad", "grpo-hard"]
    assert plan[1][1].model == str(tmp_path / "run" / "models" / "grpo-broad")
    assert plan[1][1].grpo["learning_rate"] == 5.0e-6 and plan[1][1].grpo["num_generations"] == 4


def test_only_rank_zero_writes_the_store(run_dir, monkeypatch):
    from trajkit.config import StageConfig
    from trajkit.runner import StageSpec
    from trajkit.store import Store
    from trajkit.train.launch import run_on_every_rank

    ran: list[str] = []
    spec = StageSpec("test.collective", StageConfig, lambda ctx, cfg: ran.append(ctx.name) or {"trained": True})
    store = Store(run_dir)
    monkeypatch.setenv("RANK", "1")
    assert run_on_every_rank(store, spec, StageConfig(), "grpo-a") is None
    assert ran == ["grpo-a"] and store.manifest("grpo-a") is None and store.stage_config("grpo-a") is None
    monkeypatch.setenv("RANK", "0")
    assert run_on_every_rank(store, spec, StageConfig(), "grpo-a")["summary"] == {"trained": True}
    monkeypatch.setenv("RANK", "1")
    run_on_every_rank(store, spec, StageConfig(), "grpo-a")  # complete: every rank skips it
    assert ran == ["grpo-a", "grpo-a"]


def test_every_rank_refuses_a_changed_config_before_training(run_dir, monkeypatch):
    from pydantic import Field

    from trajkit.config import StageConfig
    from trajkit.runner import StageSpec
    from trajkit.store import Store
    from trajkit.train.launch import run_on_every_rank

    class Steps(StageConfig):
        steps: int = Field(1)

    ran: list[int] = []
    spec = StageSpec("test.collective", Steps, lambda ctx, cfg: ran.append(cfg.steps) or {})
    store = Store(run_dir)
    monkeypatch.setenv("RANK", "0")
    spec_run = run_on_every_rank(store, spec, Steps(steps=1), "grpo-a")
    store.manifest_path("grpo-a").unlink()  # interrupted: the stage must resume with the same config
    for rank in ("0", "1"):  # rank 0 through the runner, rank 1 through its own check: both fail, neither trains
        monkeypatch.setenv("RANK", rank)
        with pytest.raises(UserError, match="was run with a different config"):
            run_on_every_rank(store, spec, Steps(steps=2), "grpo-a")
    assert ran == [1] and spec_run is not None
    monkeypatch.setenv("RANK", "1")
    run_on_every_rank(store, spec, Steps(steps=2), "grpo-a", fresh=True)  # --fresh: every rank starts over
    assert ran == [1, 2]


def test_a_custom_verifier_or_scorer_that_does_not_import_stops_grpo_before_training(run_dir):
    import json

    from trajkit.config import build
    from trajkit.runner import run_stage
    from trajkit.train.grpo import GRPO

    bad = {"kind": "custom", "spec": json.dumps({"path": "tests.train.helpers:nope"})}
    store = helpers.write_curated(run_dir, [helpers.even_task(0), helpers.even_task(1, verifier=bad)], {})
    cfg = build(GRPO.config, {"model": "never-loaded", "steps": 1, "data": {"split": None}})
    with pytest.raises(UserError, match="^cannot import custom verifier 'tests.train.helpers:nope'"):
        run_stage(store, GRPO, cfg, name="grpo-a", quiet=True)
    store = helpers.write_curated(run_dir / "other", [helpers.even_task(0)], {})
    cfg = build(
        GRPO.config, {"model": "never-loaded", "steps": 1, "conciseness": {"scorer": "tests.train.helpers:nope"}}
    )
    with pytest.raises(UserError, match="^cannot import conciseness scorer 'tests.train.helpers:nope'"):
        run_stage(store, GRPO, cfg, name="grpo-b", quiet=True)
    assert not store.rows("train_metrics")
