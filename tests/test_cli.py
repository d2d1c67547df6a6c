"""The CLI: speed of --help, SQL output formats, info/show/export, pipelines, user errors."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.test_store import traj
from tests.toy_stage import TOY, ToyConfig, relist
from trajkit.runner import run_stage
from trajkit.store import Store

ROOT = Path(__file__).resolve().parent.parent
TRAJKIT = [sys.executable, "-m", "trajkit.cli"]


def trajkit(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """The real command in a subprocess: exit status, stdout and stderr as a user sees them."""
    env = dict(os.environ, COLUMNS="200")
    proc = subprocess.run(
        [*TRAJKIT, *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}: {proc.stderr}")
    return proc


def invoke(*args: str):
    """The same command in-process (fast); a failure raises with its output."""
    from typer.testing import CliRunner

    from trajkit.cli import app

    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"}, catch_exceptions=False)
    assert result.exit_code == 0, (result.exit_code, result.output)
    return result


@pytest.fixture
def filled_run(run_dir):
    store = Store(run_dir)
    run_stage(store, TOY, ToyConfig(n=6), quiet=True)
    store.write("trajectories", "rollouts", [traj(i, tool="add" if i % 2 else "mul") for i in range(4)])
    return run_dir


def test_help_lists_every_sub_app_without_heavy_imports():
    proc = trajkit("--help")
    for name in (
        "synth",
        "curate",
        "train",
        "eval",
        "card",
        "push",
        "sql",
        "run",
        "demo",
        "info",
        "show",
        "export",
        "model",
    ):
        assert name in proc.stdout
    heavy = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, trajkit.cli; print(sorted(m for m in ('torch','trl','duckdb','polars','datasets','transformers') if m in sys.modules))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert heavy.stdout.strip() == "[]", "trajkit --help must not import heavy libraries"


def test_sql_formats_and_output_files(filled_run, tmp_path):
    q = "SELECT traj_id, tools_called FROM trajectories WHERE list_contains(tools_called, 'add') ORDER BY traj_id"
    rows = json.loads(invoke("sql", q, "--run", str(filled_run), "--format", "json").stdout)
    assert len(rows) == 2 and all(r["tools_called"] == ["add"] for r in rows)
    parsed = list(csv.reader(io.StringIO(invoke("sql", q, "--run", str(filled_run), "-f", "csv").stdout)))
    assert parsed[0] == ["traj_id", "tools_called"] and len(parsed) == 3
    table = invoke("sql", "SELECT count(*) AS n FROM tasks", "--run", str(filled_run)).stdout
    assert "6" in table
    out = tmp_path / "res.parquet"
    invoke("sql", q, "--run", str(filled_run), "--output", str(out))
    assert pq.read_table(out).num_rows == 2


def test_show_prints_what_a_row_holds_as_text_never_as_markup(run_dir):
    hostile = "[link=http://evil.example]click[/link] [/] [bold red]loud"
    row = traj(0, tool="[i]tool")
    row["messages"][-1] = {"role": "assistant", "content": hostile, "reasoning_content": "[/dim] think"}
    row["final_answer"] = hostile
    Store(run_dir).write("trajectories", "rollouts", [row])
    shown = invoke("show", row["traj_id"], "--run", str(run_dir)).stdout
    assert "[link=http://evil.example]click[/link] [/] [bold red]loud" in shown
    assert "[/dim] think" in shown and "[i]tool" in shown and "\x1b]8;" not in shown


def test_info_show_export(filled_run, tmp_path):
    info = invoke("info", "--run", str(filled_run)).stdout
    assert "tasks" in info and "trajectories" in info and "toy" in info
    tid = Store(filled_run).read("trajectories", ["traj_id"]).column(0)[0].as_py()
    shown = invoke("show", tid[:8], "--run", str(filled_run)).stdout
    assert "assistant" in shown and "compute" in shown
    for fmt in ("openai", "sharegpt", "jsonl"):
        out = tmp_path / f"{fmt}.jsonl"
        invoke("export", str(out), "--run", str(filled_run), "--format", fmt)
        recs = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(recs) == 4
    openai = json.loads((tmp_path / "openai.jsonl").read_text().splitlines()[0])
    assert openai["messages"][1]["tool_calls"][0]["type"] == "function"
    sharegpt = json.loads((tmp_path / "sharegpt.jsonl").read_text().splitlines()[0])
    assert [t["from"] for t in sharegpt["conversations"]] == ["human", "function_call", "observation", "gpt"]


def test_pipeline_runs_validates_all_at_once_and_resumes(tmp_path):
    good = tmp_path / "p.yaml"
    good.write_text(
        "stages:\n  - stage: tests.toy_stage:TOY\n    config: {n: 5}\n  - stage: tests.toy_stage:TOY\n    name: toy2\n    config: {n: 3}\n"
    )
    run = tmp_path / "run"
    trajkit("run", str(good), "--run", str(run))
    assert Store(run).count("tasks") == 8
    again = trajkit("run", str(good), "--run", str(run))
    assert "already complete" in again.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "stages:\n  - stage: tests.toy_stage:TOY\n    config: {n: x, shard_rows: y}\n  - stage: nope.stage\n"
    )
    proc = trajkit("run", str(bad), "--run", str(run), check=False)
    assert proc.returncode == 2
    assert (
        "n: Input should be a valid integer" in proc.stderr
        and "shard_rows" in proc.stderr
        and "unknown stage 'nope.stage'" in proc.stderr
    )


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_user_errors_are_one_line_exit_2(filled_run, tmp_path):
    assert "run directory not found" in one_line_error(trajkit("info", "--run", str(tmp_path / "missing"), check=False))
    assert "SQL error" in one_line_error(
        trajkit("sql", "SELECT * FROM no_such_table", "--run", str(filled_run), check=False)
    )
    assert "--format" in one_line_error(trajkit("sql", "SELECT 1", "--run", str(filled_run), "-f", "xml", check=False))
    assert "no task, trajectory" in one_line_error(trajkit("show", "zzzz", "--run", str(filled_run), check=False))
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("stages: [\n")
    assert "not valid YAML" in one_line_error(trajkit("run", str(cfg), "--run", str(filled_run), check=False))
    shard = next((filled_run / "tasks").glob("*.parquet"))
    original = shard.read_bytes()
    shard.write_bytes(original[:100])
    assert "changed since its stage wrote it" in one_line_error(
        trajkit("sql", "SELECT 1 FROM tasks", "--run", str(filled_run), check=False)
    )
    shard.write_bytes(original)
    pq.write_table(pq.read_table(shard).drop_columns(["question"]), shard)
    relist(Store(filled_run), shard, "tasks")  # as a trajkit that wrote another schema would
    assert "wrong schema" in one_line_error(trajkit("sql", "SELECT 1", "--run", str(filled_run), check=False))
    shard.write_bytes(original)
    relist(Store(filled_run), shard, "tasks")
