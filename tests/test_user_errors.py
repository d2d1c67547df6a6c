"""Every user error is one line and exit status 2: one test per case (in-process; one through the real command)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.test_cli import TRAJKIT, trajkit
from trajkit.cli import app
from trajkit.errors import UserError


def user_error(*args: str) -> str:
    """Run the command in-process; it must end in a UserError (main() prints it as one line, exit 2)."""
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    assert isinstance(result.exception, UserError), (result.exit_code, result.output, result.exception)
    message = str(result.exception)
    assert message and "\n" not in message
    return message


@pytest.fixture
def imported(tmp_path):
    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["curate", "import", "-r", str(run), "--preset", "humaneval", "--limit", "3"])
    assert result.exit_code == 0, result.output
    return run


def _generic(tmp_path, line: str) -> list[str]:
    path = tmp_path / "records.jsonl"
    path.write_text('{"id": "a", "question": "fine"}\n' + line + "\n")
    common = ["--preset", "generic", "--map", "id=id", "--map", "question=question", "--verifier", "none"]
    return ["curate", "import", "-r", str(tmp_path / "run"), "--path", str(path), *common]


def test_binary_config_file(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_bytes(b"\x00\xff\xfe binary")
    assert "not a readable UTF-8 text file" in user_error(
        "curate", "import", "-r", str(tmp_path / "run"), "--preset", "humaneval", "-c", str(config)
    )


def test_binary_pipeline_file(tmp_path):
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_bytes(b"\xff\xfe\x00\x01")
    assert "not a readable UTF-8 text file" in user_error("run", str(pipeline), "-r", str(tmp_path / "run"))


def test_run_directory_that_is_a_file(tmp_path):
    (tmp_path / "file").write_text("x")
    assert "cannot create the run directory" in user_error(
        "curate", "import", "-r", str(tmp_path / "file"), "--preset", "humaneval", "--limit", "1"
    )


def test_damaged_manifest(imported):
    (imported / "_stages" / "import" / "_manifest.json").write_text("{")
    message = user_error("curate", "import", "-r", str(imported), "--preset", "humaneval", "--limit", "3")
    assert "_manifest.json: damaged" in message
    assert "_manifest.json: damaged" in user_error("sql", "SELECT 1", "-r", str(imported))


def test_empty_sql(imported):
    assert user_error("sql", "", "-r", str(imported)) == "the SQL query is empty"
    assert user_error("sql", "  \n ", "-r", str(imported)) == "the SQL query is empty"


def test_damaged_shard_of_a_complete_stage_is_named_on_rerun(imported):
    [shard] = (imported / "tasks").glob("*.parquet")
    shard.write_bytes(shard.read_bytes()[:100])
    message = user_error("curate", "import", "-r", str(imported), "--preset", "humaneval", "--limit", "3")
    assert "stage 'import' is complete but" in message and shard.name in message and "--fresh" in message


def test_export_to_a_directory(imported, tmp_path):
    assert "is a directory" in user_error("export", str(tmp_path), "-r", str(imported))


def test_null_required_field_names_the_record(tmp_path):
    message = user_error(*_generic(tmp_path, '{"id": "b", "question": null}'))
    assert "record 2" in message and "question" in message and "null" in message


def test_lone_surrogate_question(tmp_path):
    message = user_error(*_generic(tmp_path, '{"id": "b", "question": "bad \\ud800 text"}'))
    assert "record 2" in message and "not valid Unicode" in message


def test_list_valued_completion(imported, tmp_path):
    path = tmp_path / "completions.jsonl"
    path.write_text('{"task_id": "HumanEval/0", "completion": ["return 1"]}\n')
    message = user_error("curate", "verify", "-r", str(imported), "--completions", str(path))
    assert "record 1: completion must be text, not list" in message


def test_too_many_sandbox_workers():
    from trajkit.verify import Sandbox

    with pytest.raises(UserError, match="this machine can run 1 to"):
        Sandbox(workers=100_000)


def test_read_only_run_directory(tmp_path):
    """A run directory on a read-only mount (root ignores permission bits, so a mount it must be)."""
    run = tmp_path / "run"
    run.mkdir()
    command = " ".join([*TRAJKIT, "curate", "import", "-r", str(run), "--preset", "humaneval", "--limit", "1"])
    script = f"mount --bind {run} {run} && mount -o remount,ro,bind {run} {run} && exec {command}"
    unshare = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]
    proc = subprocess.run(unshare, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == f"error: the run directory {run} is not writable (read-only file system or permissions)\n"


def test_the_real_command_prints_one_line_and_exits_2(tmp_path):
    proc = trajkit("sql", "", "-r", str(tmp_path), check=False)
    assert proc.returncode == 2 and proc.stderr == "error: the SQL query is empty\n"
    assert json.dumps(proc.stdout) == '""'


def test_unknown_stage_in_set_is_an_error(tmp_path):
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text("stages:\n  - stage: curate.import\n    config: {preset: humaneval, limit: 1}\n")
    message = user_error("run", str(pipeline), "-r", str(tmp_path / "run"), "--set", "nostage.limit=2")
    assert "no stage named 'nostage'" in message and "import" in message


def test_statement_without_rows_in_sql(imported):
    assert "returns no rows" in user_error("sql", ";", "-r", str(imported))


def test_pipeline_paths_resolve_from_any_directory(tmp_path, monkeypatch):
    """``${here}`` is the pipeline file's directory: the file runs the same from anywhere."""
    from trajkit.pipeline import load_pipeline

    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(tmp_path)
    plan = load_pipeline(root / "examples" / "demo.yaml", [], {"run": "r", "here": str(root / "examples")})
    harvest = next(cfg for spec, name, cfg in plan if name == "harvest")
    assert Path(harvest.servers) == root / "examples" / "servers.json" and Path(harvest.servers).is_file()
