"""curate.import: HumanEval and MBPP as published, generic JSONL/Parquet through a field mapping."""

from __future__ import annotations

import gzip
import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.curate.helpers import MBPP_RECORDS, run, write_jsonl
from trajkit.curate.imports import humaneval_path
from trajkit.errors import UserError
from trajkit.schema import content_id
from trajkit.store import Store


def test_humaneval_preset_reads_the_shipped_file(run_dir):
    store = Store(run_dir)
    m = run(store, "curate.import", preset="humaneval")
    rows = store.rows("tasks")
    assert len(rows) == 164 == m["counts"]["rows.tasks"]
    first = rows[0]
    assert first["source_id"] == "HumanEval/0" and first["source"] == "humaneval" and first["mode"] == "imported"
    assert first["task_id"] == content_id("humaneval", "HumanEval/0")
    spec = json.loads(first["verifier"]["spec"])
    assert first["verifier"]["kind"] == "unit_tests"
    assert spec["entry_point"] == "has_close_elements" and "def check(candidate)" in spec["test"]
    assert first["question"] == spec["prompt"] and first["question"].startswith("from typing import List")
    assert json.loads(first["metadata"])["canonical_solution"].strip().startswith("for idx, elem")
    assert [r["source_id"] for r in rows] == [f"HumanEval/{i}" for i in range(164)]  # file order


def test_gzipped_and_plain_jsonl_give_the_same_tasks(tmp_path):
    plain = tmp_path / "HumanEval.jsonl"
    with gzip.open(humaneval_path(), "rt") as f:
        plain.write_text("".join(list(f)[:5]))
    gz = tmp_path / "he.jsonl.gz"
    with gzip.open(gz, "wt") as f:
        f.write(plain.read_text())
    a, b = Store(tmp_path / "a", create=True), Store(tmp_path / "b", create=True)
    run(a, "curate.import", preset="humaneval", path=str(plain))
    run(b, "curate.import", preset="humaneval", path=str(gz))
    assert a.read("tasks").equals(b.read("tasks"))
    assert a.count("tasks") == 5


def test_mbpp_preset_keeps_the_id_and_builds_test_programs(run_dir, tmp_path):
    store = Store(run_dir)
    run(store, "curate.import", preset="mbpp", path=str(write_jsonl(tmp_path / "mbpp.jsonl", MBPP_RECORDS)))
    rows = store.rows("tasks")
    assert [r["source_id"] for r in rows] == ["11", "12"]
    assert rows[0]["task_id"] == content_id("mbpp", "11")
    spec = json.loads(rows[1]["verifier"]["spec"])
    assert spec["test"].startswith("import math\n") and spec["test"].count("assert sort_matrix") == 2
    assert (
        spec["entry_point"] == "sort_matrix" and json.loads(rows[0]["verifier"]["spec"])["entry_point"] == "remove_Occ"
    )
    assert "assert sort_matrix" in rows[1]["question"] and rows[1]["question"].startswith("Write a function to sort")
    meta = json.loads(rows[0]["metadata"])
    assert meta["challenge_test_list"] == MBPP_RECORDS[0]["challenge_test_list"]


def test_generic_parquet_with_a_field_mapping(run_dir, tmp_path):
    table = pa.table(
        {"uid": ["a1", "b2"], "problem": ["What is 1+1?", "What is 2*3?"], "solution": ["2", "6"], "lvl": [1, 3]}
    )
    pq.write_table(table, tmp_path / "math.parquet")
    store = Store(run_dir)
    run(
        store,
        "curate.import",
        path=str(tmp_path / "math.parquet"),
        source="toy-math",
        fields={"id": "uid", "question": "problem", "answer": "solution"},
        verifier="math",
        metadata=["lvl"],
    )
    rows = store.rows("tasks")
    assert [(r["source_id"], r["question"]) for r in rows] == [("a1", "What is 1+1?"), ("b2", "What is 2*3?")]
    assert rows[1]["verifier"] == {"kind": "math", "spec": json.dumps({"answer": "6"})}
    assert json.loads(rows[1]["metadata"]) == {"lvl": 3}
    assert rows[0]["task_id"] == content_id("toy-math", "a1")


def test_generic_without_an_id_column_uses_the_record_ordinal(run_dir, tmp_path):
    path = write_jsonl(tmp_path / "qs.jsonl", [{"q": "first?"}, {"q": "second?"}])
    store = Store(run_dir)
    run(store, "curate.import", path=str(path), fields={"question": "q"}, limit=1)
    rows = store.rows("tasks")
    assert [(r["source"], r["source_id"], r["verifier"]["kind"]) for r in rows] == [("qs", "0", "none")]


def test_datasets_directory_import(run_dir, tmp_path):
    import datasets

    datasets.Dataset.from_dict({"question": ["a?", "b?"], "answer": ["1", "2"]}).save_to_disk(str(tmp_path / "ds"))
    store = Store(run_dir)
    run(
        store,
        "curate.import",
        path=str(tmp_path / "ds"),
        source="ds",
        fields={"question": "question", "answer": "answer"},
        verifier="math",
    )
    assert [r["question"] for r in store.rows("tasks")] == ["a?", "b?"]


@pytest.mark.parametrize(
    "records, config, message",
    [
        ([{"q": "x"}], {"fields": {"question": "missing"}}, "missing field(s) missing"),
        ([{"id": 1, "q": "x"}, {"id": 1, "q": "y"}], {"fields": {"question": "q", "id": "id"}}, "repeats record 1"),
        ([{"text": "x"}], {"preset": "mbpp"}, "missing field(s) task_id, test_list"),
    ],
)
def test_bad_input_is_a_user_error(run_dir, tmp_path, records, config, message):
    path = write_jsonl(tmp_path / "in.jsonl", records)
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run(Store(run_dir), "curate.import", path=str(path), **config)


def test_config_errors_are_reported_before_work(run_dir, tmp_path):
    with pytest.raises(UserError, match="needs fields.question"):
        run(Store(run_dir), "curate.import", path=str(tmp_path / "x.jsonl"))
    with pytest.raises(UserError, match="file not found"):
        run(Store(run_dir), "curate.import", path=str(tmp_path / "x.jsonl"), fields={"question": "q"})
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"q": "ok"}\n{not json\n')
    with pytest.raises(UserError, match="bad.jsonl:2: not valid JSON"):
        run(Store(run_dir), "curate.import", path=str(bad), fields={"question": "q"}, name="bad")


def test_rerun_skips_and_a_second_copy_gives_the_same_ids(run_dir, tmp_path):
    store = Store(run_dir)
    run(store, "curate.import", preset="humaneval")
    again = run(store, "curate.import", preset="humaneval")
    assert store.count("tasks") == 164 and again["counts"]["rows.tasks"] == 164  # the stored manifest, not a rerun
    shutil.copy(humaneval_path(), tmp_path / "copy.jsonl.gz")
    run(store, "curate.import", name="copy", preset="humaneval", path=str(tmp_path / "copy.jsonl.gz"))
    assert store.ids("tasks", stage="copy") == store.ids("tasks", stage="import")


def test_a_custom_task_source_is_mapped_like_a_file(run_dir):
    store = Store(run_dir)
    run(
        store,
        "curate.import",
        source_fn="tests.curate.task_sources:arithmetic",
        source_params={"count": 2, "start": 5},
        fields={"id": "id", "question": "problem", "answer": "answer"},
        verifier="math",
    )
    rows = store.rows("tasks")
    assert [r["source_id"] for r in rows] == ["sum-5", "sum-6"]
    assert rows[0]["source"] == "arithmetic" and rows[0]["question"] == "What is 5 + 5?"
    assert rows[0]["verifier"] == {"kind": "math", "spec": json.dumps({"answer": "10"})}


@pytest.mark.parametrize(
    "fn, message",
    [
        ("nowhere.at_all:fn", "cannot import task source"),
        ("tests.curate.task_sources:not_dicts", "not a dict"),
        ("tests.curate.task_sources:crashes", "source is down"),
    ],
)
def test_a_broken_task_source_is_a_user_error(run_dir, fn, message):
    with pytest.raises(UserError, match=message):
        run(Store(run_dir), "curate.import", source_fn=fn, fields={"question": "problem"})
