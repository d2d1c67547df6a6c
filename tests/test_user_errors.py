"""Every user error is one line and exit status 2: one test per case (in-process; one through the real command)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tests.test_cli import TRAJKIT, trajkit
from trajkit.cli import app
from trajkit.errors import UserError
from trajkit.store import Store


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


def test_damaged_shard_of_a_complete_stage_is_redone_on_rerun(imported):
    """Resume trusts a complete stage only while its shards are the ones its manifest lists (issue 38 item 5,
    issue 41 item 3): a shard truncated, rewritten with the same rows, lost or copied in twice redoes it."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.test_cli import invoke

    args = ("curate", "import", "-r", str(imported), "--preset", "humaneval", "--limit", "3")
    [shard] = (imported / "tasks").glob("*.parquet")
    original = shard.read_bytes()
    data = pq.read_table(shard)
    relabelled = data.set_column(data.schema.get_field_index("source_id"), "source_id", pa.array(["a", "b", "c"]))
    manifest = imported / "_stages" / "import" / "_manifest.json"
    lying = json.loads(manifest.read_text()) | {"outputs": {"tasks": 4}}
    for damage in (
        lambda: shard.write_bytes(original[:100]),
        lambda: pq.write_table(relabelled, shard),  # the same rows, one field changed
        shard.unlink,
        lambda: shutil.copy(shard, shard.with_name(shard.name.replace("000000", "000001"))),
        lambda: manifest.write_text(json.dumps(lying)),  # counts that disagree with the shards
    ):
        damage()
        assert "import: redone:" in invoke(*args).output
        assert Store(imported).count("tasks") == 3 and not Store(imported).problems("tasks")
        assert [p.name for p in (imported / "tasks").glob("*.parquet")] == [shard.name]
        assert "already complete" in invoke(*args).output


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
    proc = trajkit("sql", "", "-r", str(Store(tmp_path / "run", create=True).root), check=False)
    assert proc.returncode == 2 and proc.stderr == "error: the SQL query is empty\n"
    assert json.dumps(proc.stdout) == '""'


def test_an_unknown_variable_in_a_pipeline_or_curriculum_file_is_named_with_its_place(tmp_path):
    """``${name}`` other than the file's own variables was left as written (a path named ``${rn}/models``)."""
    from trajkit.train.curriculum import load_curriculum

    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(
        "stages:\n  - stage: curate.import\n    config: {preset: humaneval, path: '${here}/${HOME}/x'}\n"
    )
    message = user_error("run", str(pipeline), "-r", str(tmp_path / "run"))
    assert (
        message
        == f"{pipeline}: unknown variable ${{HOME}} in stages[0].config.path (this file has ${{run}} and ${{here}})"
    )
    curriculum = tmp_path / "stages.yaml"
    curriculum.write_text("model: ${rn}/models/sft\nstages: [{name: a}]\n")
    with pytest.raises(UserError, match=r"stages.yaml: unknown variable \$\{rn\} in model \(this file has \$\{run\}\)"):
        load_curriculum(curriculum, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_unknown_stage_in_set_is_an_error(tmp_path):
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text("stages:\n  - stage: curate.import\n    config: {preset: humaneval, limit: 1}\n")
    message = user_error("run", str(pipeline), "-r", str(tmp_path / "run"), "--set", "nostage.limit=2")
    assert "no stage named 'nostage'" in message and "import" in message


def test_statement_without_rows_in_sql(imported):
    assert "no statement to run" in user_error("sql", ";", "-r", str(imported))


def test_pipeline_paths_resolve_from_any_directory(tmp_path, monkeypatch):
    """``${here}`` is the pipeline file's directory: the file runs the same from anywhere."""
    from trajkit.pipeline import load_pipeline

    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(tmp_path)
    plan = load_pipeline(root / "examples" / "demo.yaml", [], {"run": "r", "here": str(root / "examples")})
    harvest = next(cfg for spec, name, cfg in plan if name == "harvest")
    assert Path(harvest.servers) == root / "examples" / "servers.json" and Path(harvest.servers).is_file()


# ---------------------------------------------------------------- found by a second hostile pass


def test_a_command_line_click_cannot_parse_is_one_line():
    assert user_error("sql", "SELECT 1", "--limit", "-1").startswith("Invalid value for '--limit'")
    assert user_error("sql", "SELECT 1", "--limit", "many").endswith("(see trajkit sql --help)")
    assert user_error("nosuch") == "No such command 'nosuch' (see trajkit --help)"
    assert user_error("curate", "import", "--bogus") == "No such option: --bogus (see trajkit curate import --help)"
    assert "Missing argument" in user_error("sql")


def test_a_file_system_error_names_the_path(tmp_path, imported):
    (imported / "_stages").rename(tmp_path / "moved")
    (imported / "_stages").write_text("a file where a folder belongs")
    message = user_error("curate", "import", "-r", str(imported), "--preset", "humaneval", "--limit", "3")
    assert message == f"{imported / '_stages' / 'import'}: Not a directory"
    assert user_error("sql", "SELECT 1", "-r", str(imported), "-o", "/proc/none.csv").endswith(
        "No such file or directory"
    )


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--world-size", "0"], "--world-size must be at least 1, not 0"),
        (["--rank", "2", "--world-size", "2"], "--rank 2 is not in 0..1 (--world-size 2)"),
        (["--budget-tokens", "-5"], "--budget-tokens must be a number >= 0, not -5"),
        (["--budget-cost", "nan"], "--budget-cost must be a number >= 0, not nan"),
    ],
)
def test_shard_and_budget_options(tmp_path, flags, expected):
    run = tmp_path / "run"
    assert user_error("curate", "import", "-r", str(run), "--preset", "humaneval", *flags) == expected
    assert not run.exists()


def test_an_override_without_a_key(tmp_path):
    base = ["curate", "import", "-r", str(tmp_path / "run"), "--preset", "humaneval"]
    for bad in ("=3", "a..b=3", "limit"):
        assert user_error(*base, "--set", bad).startswith(f"override {bad!r} is not KEY=VALUE")
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text("stages:\n  - stage: curate.import\n")
    assert "is not KEY=VALUE" in user_error("run", str(pipeline), "-r", str(tmp_path / "run"), "--set", "import.limit")


def test_user_code_that_cannot_be_imported(tmp_path, monkeypatch):
    (tmp_path / "broken_source.py").write_text("def records(:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    base = ["curate", "import", "-r", str(tmp_path / "run"), "--map", "id=id", "--map", "question=q"]
    assert "SyntaxError" in user_error(*base, "--source-fn", "broken_source:records")
    assert "relative import" in user_error(*base, "--source-fn", ".relative:records")


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("{stage: curate.import, config: [1]}", "'config' a mapping"),
        ("{stage: curate.import, name: [a]}", "'name' must be text"),
        ("{stage: [curate.import]}", "a 'stage' key naming a stage"),
    ],
)
def test_a_pipeline_entry_of_the_wrong_shape(tmp_path, entry, expected):
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(f"stages:\n  - {entry}\n")
    assert expected in user_error("run", str(pipeline), "-r", str(tmp_path / "run"))


def test_yaml_aliases_that_contain_themselves_or_explode(tmp_path, monkeypatch):
    monkeypatch.setattr("trajkit.config.MAX_EXPANDED_VALUES", 1000)  # the same walk as at a million, faster
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text("a: &a\n  b: *a\nstages:\n  - stage: curate.import\n")
    assert "contains it" in user_error("run", str(pipeline), "-r", str(tmp_path / "run"))
    levels = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 4)]
    pipeline.write_text("\n".join(levels) + "\nstages:\n  - stage: curate.import\n")
    assert "expand to more than" in user_error("run", str(pipeline), "-r", str(tmp_path / "run"))
    assert "is a directory, not a YAML file" in user_error("run", str(tmp_path), "-r", str(tmp_path / "run"))


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("_manifest.json", '{"stage": "import"}', "damaged (no kind, config_hash, finished_at, seconds)"),
        ("_config.json", "{}", "damaged (no config, config_hash)"),
        (
            "_manifest.json",
            '{"stage": "import", "kind": "k", "config_hash": "h", "finished_at": "t", "seconds": "1", "outputs": []}',
            "damaged (seconds, outputs of the wrong type)",
        ),
    ],
)
def test_a_stage_file_missing_its_keys(imported, name, text, expected):
    (imported / "_stages" / "import" / name).write_text(text)
    assert expected in user_error("curate", "import", "-r", str(imported), "--preset", "humaneval", "--limit", "3")


@pytest.mark.parametrize(
    ("preset", "record", "expected"),
    [
        ("mbpp", '{"task_id": 1, "text": 5, "test_list": []}', "field text must be str, not 5"),
        ("mbpp", '{"task_id": 1, "text": "t", "test_list": "assert f()"}', "test_list must be list of str"),
        ("mbpp", '{"task_id": 1, "text": "t", "test_list": [], "test_setup_code": 1}', "test_setup_code must be str"),
        ("humaneval", '{"task_id": 1, "prompt": "p", "test": 5, "entry_point": "f"}', "field test must be str"),
    ],
)
def test_a_published_format_field_of_the_wrong_type(tmp_path, preset, record, expected):
    path = tmp_path / "records.jsonl"
    path.write_text(record + "\n")
    message = user_error("curate", "import", "-r", str(tmp_path / "run"), "--preset", preset, "--path", str(path))
    assert "record 1" in message and expected in message


def test_an_empty_question(tmp_path):
    assert "record 2: field question is empty" in user_error(*_generic(tmp_path, '{"id": "b", "question": "  "}'))


def test_sql_only_reads(imported, tmp_path):
    for statement, message in (
        (f"COPY tasks TO '{tmp_path / 'out.csv'}'", "only read statements"),
        (f"ATTACH '{tmp_path / 'x.db'}' AS x", "only read statements"),
        ("SELECT 1; CREATE TABLE t AS SELECT 1", "one statement at a time"),
    ):
        assert message in user_error("sql", statement, "-r", str(imported))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_sql_columns_of_one_name(imported):
    message = user_error("sql", "SELECT * FROM tasks a JOIN tasks b USING (task_id)", "-r", str(imported))
    assert "more than one column named" in message and "AS" in message


def test_export_where_is_one_condition(imported, tmp_path):
    for where in ("true) OR (true", "true) UNION ALL (SELECT * FROM trajectories"):
        message = user_error("export", str(tmp_path / "out.jsonl"), "-r", str(imported), "--where", where)
        assert message.startswith(f"--where {where!r} is not one SQL condition")


def test_show_takes_an_id_not_a_pattern(imported):
    assert user_error("show", "%", "-r", str(imported)).startswith("no task, trajectory, sample or server with id '%'")
    assert user_error("show", "", "-r", str(imported)) == "give a row id (or a unique prefix of one), not ''"


def test_arguments_that_are_not_utf8(imported, tmp_path):
    """Bytes that are not UTF-8 reach Python as lone surrogates; DuckDB failed on them with a traceback."""
    assert user_error("sql", "SELECT '\udcff'", "-r", str(imported)) == "the SQL query is not valid UTF-8 text"
    assert "not '\\udcff'" in user_error("show", "\udcff", "-r", str(imported))
    where = ["--where", "\udcff"]
    assert (
        user_error("export", str(tmp_path / "o.jsonl"), "-r", str(imported), *where)
        == "--where is not valid UTF-8 text"
    )


def test_a_completion_that_is_not_unicode(imported, tmp_path):
    path = tmp_path / "completions.jsonl"
    path.write_text('{"task_id": "HumanEval/0", "completion": "x \\ud800"}\n')
    message = user_error("curate", "verify", "-r", str(imported), "--completions", str(path))
    assert "record 1: completion is not valid Unicode text" in message


def test_pass_at_zero(imported, tmp_path):
    message = user_error("curate", "verify", "-r", str(imported), "--completions", str(tmp_path), "--ks", "0")
    assert "every k of pass@k must be at least 1" in message


def test_model_serve_port_out_of_range():
    assert "'--port'" in user_error("model", "serve", "--script", "json:dumps", "--port", "70000")


def test_model_tiny_never_replaces_what_is_not_a_model(tmp_path, monkeypatch):
    (tmp_path / "keep.txt").write_text("precious")
    monkeypatch.chdir(tmp_path)
    for target in (".", str(tmp_path), "keep.txt"):
        assert "exists and is not a model directory" in user_error("model", "tiny", target)
    assert (tmp_path / "keep.txt").read_text() == "precious"
    assert "not a tokenizer directory" in user_error("model", "tiny", "new", "--tokenizer", str(tmp_path))
    assert "'--hidden'" in user_error("model", "tiny", "new", "--hidden", "0")


def test_ctrl_c_says_how_to_resume(imported, monkeypatch):
    from trajkit.store import Store

    def interrupted(self, query):
        raise KeyboardInterrupt

    monkeypatch.setattr(Store, "sql", interrupted)
    result = CliRunner().invoke(app, ["sql", "SELECT 1", "-r", str(imported)])
    assert result.exit_code == 130 and result.stderr == "interrupted; rerun the same command to resume\n"


def test_filter_bounds_that_reject_everything(tmp_path):
    message = user_error("curate", "filter", "-r", str(tmp_path), "--min-chars", "100", "--max-chars", "10")
    assert "min_chars (100) is above max_chars (10)" in message


def test_an_eval_set_without_a_path(tmp_path):
    """``name=`` read the current directory as a datasets folder and named whatever file failed there."""
    for spec in ("held=", "=evals.jsonl"):
        message = user_error("curate", "decontaminate", "-r", str(tmp_path), "--eval", spec)
        assert "give NAME=PATH, both non-empty" in message


def test_diversity_where_is_one_condition(imported):
    message = user_error("eval", "diversity", "-r", str(imported), "--where", "true) OR (true")
    assert message.startswith("where 'true) OR (true' is not one SQL condition")


def test_zero_training_processes(imported):
    args = ["train", "sft", "-r", str(imported), "--model", "m", "--accelerate-config", "ddp", "--num-processes", "0"]
    assert "'--num-processes'" in user_error(*args)


def test_a_shard_no_stage_wrote_is_not_data(imported):
    """A Parquet file dropped into a table's folder was exported as accepted; ``info`` said nothing (issue 41)."""
    import shutil

    from tests.test_cli import invoke

    [shard] = (imported / "tasks").glob("*.parquet")
    shutil.copy(shard, imported / "tasks" / "extra.parquet")
    assert invoke("sql", "SELECT count(*) AS n FROM tasks", "-r", str(imported), "-f", "csv").output.split() == [
        "n",
        "3",
    ]
    lines = invoke("info", "-r", str(imported)).output.splitlines()
    assert f"{imported / 'tasks' / 'extra.parquet'}: no stage listed this shard" in lines[0]
    message = user_error("export", str(imported / "out.jsonl"), "-r", str(imported))
    assert message.startswith(f"{imported / 'tasks' / 'extra.parquet'}: no stage listed this shard")
    assert "(1 shard(s) disagree" in message and "remove the files no stage listed" in message


def test_a_stale_stage_is_refused_in_one_line(imported, tmp_path):
    """After ``decontaminate --fresh`` rejected other tasks, ``split`` said "already complete" (issue 34)."""
    from tests.test_cli import invoke

    evals, first = tmp_path / "evals.jsonl", tmp_path / "first.jsonl"
    questions = [t["question"] for t in Store(imported).rows("tasks")]
    evals.write_text(json.dumps({"question": questions[0]}) + "\n")
    first.write_text(json.dumps({"question": questions[1]}) + "\n")
    invoke("curate", "decontaminate", "-r", str(imported), "--eval", f"first={first}")
    invoke("curate", "split", "-r", str(imported))
    invoke("curate", "decontaminate", "-r", str(imported), "--eval", f"mine={evals}", "--fresh")
    message = user_error("curate", "split", "-r", str(imported))
    assert message == (
        "stage 'split' is stale: its input rejected from stage 'decontaminate' changed since it ran; "
        "rerun it with --fresh, or with --redo-stale to redo it only if stale"
    )
    assert "split: redone: its input rejected" in invoke("curate", "split", "-r", str(imported), "--redo-stale").output
    assert Store(imported).count("splits") == 2


def test_a_file_where_a_table_folder_belongs(imported):
    import shutil

    shutil.rmtree(imported / "tasks")
    (imported / "tasks").write_text("a file where the table's folder belongs")
    assert "tasks: a file where the tasks table's folder belongs" in user_error("sql", "SELECT 1", "-r", str(imported))


def test_a_key_given_twice_in_a_yaml_file(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(
        "x-base: &base {limit: 3}\nlimit: 3\npreset: humaneval\nlimit: 4\nnested:\n  <<: *base\n  limit: 2\n"
    )
    message = user_error("curate", "import", "-r", str(tmp_path / "run"), "-c", str(config))
    assert message == f"{config}: line 4 is not valid YAML (key 'limit' given twice in one mapping)"


def test_stage_names_that_share_a_folder(imported, tmp_path):
    """``a/b`` and ``a_b`` are both stored in ``_stages/a_b``: the second was skipped as complete."""
    args = ["curate", "import", "-r", str(imported), "--preset", "humaneval", "--limit", "3"]
    assert CliRunner().invoke(app, [*args, "--name", "x y"]).exit_code == 0
    message = user_error(*args, "--name", "x_y")
    assert (
        message
        == f"stage names 'x_y' and 'x y' (already in {imported}) share the folder _stages/x_y; give this stage another name"
    )
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text("stages:\n  - {stage: curate.import, name: a/b}\n  - {stage: curate.import, name: a_b}\n")
    assert "stage name 'a_b' shares its folder with another stage's" in user_error(
        "run", str(pipeline), "-r", str(imported)
    )


def test_a_server_without_a_name(tmp_path):
    servers = tmp_path / "servers.json"
    servers.write_text('{"mcpServers": {" ": {"command": "cat"}}}')
    assert "' ': a server needs a name" in user_error(
        "synth", "harvest", "-r", str(tmp_path / "run"), "--servers", str(servers)
    )


def test_numbers_in_a_config_are_finite(tmp_path):
    """``inf`` passed every bound (an endless tool timeout) and went into _config.json as non-standard JSON."""
    base = ["curate", "passk", "-r", str(tmp_path), "--model", "m"]
    assert "tool_timeout_s: Input should be a finite number" in user_error(*base, "--tool-timeout-s", "inf")
    assert "temperature: Input should be a finite number" in user_error(*base, "--set", "temperature=.inf")


def test_a_field_mapping_given_twice_or_empty(tmp_path):
    base = ["curate", "import", "-r", str(tmp_path / "run"), "--path", str(tmp_path / "r.jsonl")]
    assert user_error(*base, "--map", "question=q", "--map", "question=id") == "--map question given twice ('q', 'id')"
    assert "every field maps to a column name" in user_error(*base, "--map", "question=q", "--map", "id=")
    message = user_error(*base, "--map", "question=q", "--source-param", "a=1")
    assert "source_params are the keyword arguments of a source_fn" in message


def test_split_null_as_a_flag(tmp_path):
    """``--split null`` was refused though ``--help`` offers null; another split name says how to give null."""
    from trajkit.clikit import run_command

    message = user_error("eval", "passk", "-r", str(tmp_path), "--model", "m", "--split", "nul")
    assert "or null for every task (--set split=null)" in message
    with pytest.raises(UserError, match="no tasks in the run"):  # split null: every task, and the run has none
        run_command("eval.passk", tmp_path / "run", {"split": "null", "models": [{"model": "m", "backend": "openai"}]})


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ({b"trajkit.schema_version": b"7"}, "written as tasks schema v7 by a newer trajkit (this one reads up to v1)"),
        ({b"trajkit.table": b"samples"}, "a shard of table 'samples', not 'tasks'"),
    ],
)
def test_a_shard_of_a_newer_trajkit_or_another_table(imported, metadata, expected):
    import pyarrow.parquet as pq

    from tests.toy_stage import relist

    [shard] = (imported / "tasks").glob("*.parquet")
    data = pq.read_table(shard)
    pq.write_table(data.replace_schema_metadata({**data.schema.metadata, **metadata}), shard)
    relist(Store(imported), shard, "tasks")
    assert expected in user_error("sql", "SELECT count(*) FROM tasks", "-r", str(imported))


def test_an_empty_path_is_not_the_current_directory(tmp_path, monkeypatch):
    """``-r "$RUN"`` with RUN unset wrote a run into the current directory."""
    monkeypatch.chdir(tmp_path)
    assert (
        user_error("curate", "import", "-r", "", "--preset", "humaneval")
        == "-r is empty: give a path (an unset shell variable?)"
    )
    assert user_error("curate", "import", "--run=", "--preset", "humaneval").startswith("--run is empty")
    assert list(tmp_path.iterdir()) == []


def test_card_front_matter_values_are_one_line(tmp_path):
    """A title with a line break and ``---`` ended the YAML header: a yaml.ScannerError traceback."""
    run = str(Store(tmp_path / "run", create=True).root)
    message = user_error("card", "-r", run, "--title", "T\n---\nbody")
    assert "pretty_name: Value error, 'T\\n---\\nbody' must be one non-empty line" in message
    assert "must be one non-empty line" in user_error("card", "-r", run, "--tag", "")


def test_json_output_has_no_nan(imported, tmp_path):
    """Python wrote NaN and Infinity, which JSON has not (jq and most parsers reject the file)."""
    query = "SELECT 'nan'::DOUBLE AS n, ['inf'::DOUBLE] AS l, {'x': '-inf'::DOUBLE} AS s"
    result = CliRunner().invoke(app, ["sql", query, "-r", str(imported), "-f", "json"])
    assert json.loads(result.stdout) == [{"n": None, "l": [None], "s": {"x": None}}]
    assert CliRunner().invoke(app, ["sql", query, "-r", str(imported), "-o", str(tmp_path / "o.jsonl")]).exit_code == 0
    assert json.loads((tmp_path / "o.jsonl").read_text()) == {"n": None, "l": [None], "s": {"x": None}}


def test_a_damaged_call_cache(tmp_path):
    (tmp_path / "_cache").mkdir()
    (tmp_path / "_cache" / "calls.sqlite").write_text("not a database")
    message = user_error("model", "serve", "--replay", str(tmp_path), "--port", "0")
    assert message.endswith(
        "calls.sqlite: cannot use this call cache (file is not a database); remove it to start one afresh"
    )


def test_a_judge_threshold_off_the_1_to_5_scale(tmp_path):
    """``--min-completeness 9`` rejected every judged trajectory without a word."""
    message = user_error("synth", "filter", "-r", str(tmp_path), "--min-completeness", "9")
    assert "min_completeness: Input should be less than or equal to 5" in message


def test_model_endpoint_and_limits(tmp_path):
    base = ["synth", "tasks", "-r", str(tmp_path), "--model", "m", "--backend", "openai"]
    message = user_error(*base, "--base-url", "localhost:8000")
    assert "'localhost:8000' is not an http(s) URL, e.g. http://localhost:8000/v1" in message
    message = user_error(*base, "--base-url", "http://localhost:8000/v1", "--set", "model.max_concurrency=0")
    assert "model.max_concurrency: Input should be greater than or equal to 1" in message  # ZeroDivisionError before


def test_read_commands_refuse_what_is_not_a_run(tmp_path):
    """A missing path, a file and a folder no stage wrote to are refused in one line (exit 2) by every command
    that reads a run, and nothing is written there; an empty run is a run."""
    (tmp_path / "file").write_text("x")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "notes.txt").write_text("x")
    reads = (
        ["sql", "SELECT 1"],
        ["info"],
        ["show", "abc"],
        ["export", str(tmp_path / "out.jsonl")],
        ["card"],
        ["push", "--repo", "user/name", "--dry-run"],
        ["view", "--port", "0"],
    )
    reasons = {"missing": "run directory not found", "file": "is a file, not a run", "folder": "is not a trajkit run"}
    for name, reason in reasons.items():
        for args in reads:
            assert reason in user_error(*args, "--run", str(tmp_path / name)), (name, args)
    assert sorted(p.name for p in (tmp_path / "folder").iterdir()) == ["notes.txt"]
    assert not (tmp_path / "out.jsonl").exists()
    Store(tmp_path / "empty", create=True)
    for args in (*reads[:2], reads[3]):
        assert CliRunner().invoke(app, [*args, "--run", str(tmp_path / "empty")]).exit_code == 0, args
    assert (tmp_path / "out.jsonl").read_text() == ""


def test_a_command_stopped_by_bad_input_leaves_no_run_folder_it_made(tmp_path):
    args = ["synth", "tasks", "--model", "m", "-r"]
    assert "no servers" in user_error(*args, str(tmp_path / "runs" / "new"))
    assert not (tmp_path / "runs").exists()  # the run folder and the parent made for it
    for before in ({}, {"notes.txt": "mine"}):  # a folder that existed is kept, as it was
        folder = tmp_path / f"existing{len(before)}"
        folder.mkdir()
        for name, text in before.items():
            (folder / name).write_text(text)
        assert "no servers" in user_error(*args, str(folder))
        assert sorted(p.name for p in folder.iterdir()) == sorted(before)
    # a run folder this process made and wrote to stays
    from trajkit.store import CREATED_RUNS, remove_new_empty_runs

    since = len(CREATED_RUNS)
    Store(tmp_path / "made", create=True).stage_dir("s").mkdir()
    (tmp_path / "made" / "_stages" / "s" / "_manifest.json").write_text("{}")
    remove_new_empty_runs(since)
    assert (tmp_path / "made" / "_stages" / "s" / "_manifest.json").is_file()


def test_a_stage_of_another_kind_under_the_same_name(run_dir):
    """``curate filter`` and ``synth filter`` are both ``filter`` by default: the second was skipped as complete."""
    assert CliRunner().invoke(app, ["curate", "filter", "--zero-variance", "-r", str(run_dir)]).exit_code == 0
    for extra in ([], ["--fresh"], ["--fresh", "--executor", "ray"]):  # nor is the other stage's output dropped
        message = user_error("synth", "filter", "-r", str(run_dir), *extra)
        assert message == (
            f"stage 'filter' in {run_dir} is a curate.filter stage, not synth.filter; give this one another name "
            "(--name, or name: in a pipeline file)"
        )
        assert Store(run_dir).manifest("filter")["kind"] == "curate.filter"
    assert CliRunner().invoke(app, ["synth", "filter", "-r", str(run_dir), "--name", "synth-filter"]).exit_code == 0


@pytest.mark.parametrize(
    ("grpo", "says"),
    [
        ({"num_generation": 4}, "grpo.num_generation: not a GRPOConfig field"),  # a key TRL's parser does not know
        ({"learning_rate": "fast"}, "invalid float value: 'fast'"),  # a value of the wrong type
    ],
)
def test_a_bad_grpo_mapping_is_one_line(tmp_path, grpo, says):
    """TRL's own parser reads a stage's grpo: mapping; what it refuses is one line (exit 2), before any work."""
    config = tmp_path / "stages.yaml"
    config.write_text(yaml.safe_dump({"model": "m", "stages": [{"name": "a", "steps": 1, "grpo": grpo}]}))
    assert says in user_error("train", "grpo", "--config", str(config), "--run", str(tmp_path / "run"))
