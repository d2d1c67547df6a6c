"""The accepted definition: stage rejections, status, verdicts, judge thresholds, human reviews."""

from __future__ import annotations

import json

import pytest

from trajkit import accepted as A
from trajkit.errors import UserError
from trajkit.store import Store


def _traj(i: str, task: str, status: str = "completed", verdict: str | None = None) -> dict:
    return {"traj_id": i, "task_id": task, "status": status, "verdict": verdict}


@pytest.fixture
def store(run_dir):
    s = Store(run_dir)
    s.write("tasks", "t", [{"task_id": t, "mode": "single_tool", "question": t} for t in ("A", "B", "C", "D")])
    s.write(
        "trajectories",
        "r",
        [
            _traj("ok", "A", verdict="pass"),
            _traj("trunc", "A", "truncated"),
            _traj("lowjudge", "A"),
            _traj("vfail", "B", verdict="fail"),
            _traj("filtered", "B"),
            _traj("human", "B"),
            _traj("taskout", "C"),
        ],
    )
    s.write(
        "trajectory_quality",
        "j",
        [{"traj_id": "ok", "completeness": 4.0}, {"traj_id": "lowjudge", "completeness": 2.0}],
    )
    s.write("task_quality", "j", [{"task_id": "D", "quality_score": 1.5}, {"task_id": "A", "quality_score": 4.0}])
    s.write(
        "samples",
        "v",
        [
            {"sample_id": "s1", "task_id": "B", "sample_index": 0, "verdict": "fail", "traj_id": "vfail"},
            {"sample_id": "s2", "task_id": "B", "sample_index": 1, "verdict": "pass", "traj_id": "human"},
            {"sample_id": "s3", "task_id": "C", "sample_index": 0, "verdict": "timeout"},
            {"sample_id": "s4", "task_id": "A", "sample_index": 0, "verdict": "pass"},
        ],
    )
    s.write(
        "rejected",
        "f",
        [
            {
                "reject_id": "x",
                "row_id": "filtered",
                "table_name": "trajectories",
                "stage": "f",
                "reason": "no_tool_call",
            }
        ],
    )
    return s


def test_accepted_rows_follow_every_rule(store):
    A.add_review(store, "human", "trajectory", "reject", "wrong answer", "ann")
    A.add_review(store, "C", "task", "reject", None, "ann")
    assert A.accepted_ids(store, "trajectories") == {"ok"}
    # tasks: D is judged below the floor, C was rejected by a human (and has no passing sample)
    assert A.accepted_ids(store, "tasks") == {"A", "B"}
    # samples: s1 and s3 failed; s2 belongs to a human-rejected trajectory
    assert A.accepted_ids(store, "samples") == {"s4"}
    loose = A.Thresholds(min_completeness=None, min_task_quality=None)
    assert A.accepted_ids(store, "trajectories", loose) == {"ok", "lowjudge"}
    assert A.accepted_ids(store, "tasks", loose) == {"A", "B", "D"}
    assert A.accepted(store, "trajectories").column("traj_id").to_pylist() == ["ok"]


def test_rows_of_a_task_a_stage_rejected_are_not_accepted(store):
    reject = {"reject_id": "y", "row_id": "A", "table_name": "tasks", "stage": "decontam", "reason": "contaminated"}
    store.write("rejected", "decontam", [reject])
    assert "ok" not in A.accepted_ids(store, "trajectories")
    assert "s4" not in A.accepted_ids(store, "samples")


def test_training_reads_the_accepted_rule(store):
    from trajkit.train.data import DataFilter, task_rows

    A.add_review(store, "B", "task", "reject", reviewer="ann")
    # D is judged below the floor, B rejected by a human; C (no passing sample) stays for a curriculum
    assert [t["task_id"] for t in task_rows(store, DataFilter(split=None))] == ["A", "C"]


def test_latest_review_wins(store):
    A.add_review(store, "human", "trajectory", "reject", reviewer="ann")
    assert A.latest_reviews(store) == {"human": "reject"}
    A.add_review(store, "human", "trajectory", "accept", "on second look fine", reviewer="bob")
    assert A.latest_reviews(store) == {"human": "accept"}
    assert "human" in A.accepted_ids(store, "trajectories")
    assert len(store.read("reviews")) == 2


def test_bad_reviews_are_user_errors(store):
    with pytest.raises(UserError, match="decision"):
        A.add_review(store, "ok", "trajectory", "maybe")
    with pytest.raises(UserError, match="target kind"):
        A.add_review(store, "ok", "sample", "accept")
    with pytest.raises(UserError, match="no trajectory 'nope'"):
        A.add_review(store, "nope", "trajectory", "accept")
    with pytest.raises(UserError, match="no accepted rows"):
        A.accepted_sql("servers")


def test_empty_run_has_no_accepted_rows(run_dir):
    s = Store(run_dir)
    assert A.accepted_ids(s, "trajectories") == set()
    assert A.latest_reviews(s) == {}


def test_default_thresholds_are_documented():
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "schema.md").read_text()
    for name, value in vars(A.DEFAULT).items():
        assert f"`{name}={value}`" in doc


def test_export_writes_accepted_rows_unless_all(store, tmp_path):
    from tests.test_cli import invoke

    A.add_review(store, "human", "trajectory", "reject", reviewer="ann")
    out = tmp_path / "out.jsonl"
    res = invoke("export", str(out), "--run", str(store.root), "--format", "jsonl")
    assert [json.loads(line)["traj_id"] for line in out.read_text().splitlines()] == ["ok", "taskout"]
    assert "wrote 2 accepted trajectories" in res.output
    invoke("export", str(out), "--run", str(store.root), "--format", "jsonl", "--all", "--where", "task_id = 'B'")
    assert sorted(json.loads(line)["traj_id"] for line in out.read_text().splitlines()) == [
        "filtered",
        "human",
        "vfail",
    ]


def test_synth_filter_applies_verdicts_and_default_thresholds(store):
    from tests.test_cli import invoke

    help_text = invoke("synth", "filter", "--help").output
    assert help_text.count("at least this; default 3.0.") == 2  # min_completeness and min_task_quality
    out = invoke("synth", "filter", "--run", str(store.root), "--rule", "no_tool_call").output
    assert "kept 0 of 7" in out
    rejected = {(r["row_id"], r["reason"]) for r in store.rows("rejected") if r["stage"] != "f"}
    assert {("vfail", "verdict_fail"), ("lowjudge", "low_completeness"), ("trunc", "status_truncated")} <= rejected
    assert "low_completeness 1" in out and "verdict_fail 1" in out


def test_a_run_written_before_verdict_and_reason_code_reads_them_as_null(run_dir, tmp_path):
    import pyarrow.parquet as pq

    from tests.test_cli import invoke
    from tests.toy_stage import relist
    from trajkit import schema as S

    s = Store(run_dir)
    s.write("trajectories", "old", [_traj("a", "A"), _traj("b", "A", "failed")])
    s.write("samples", "old", [{"sample_id": "s", "task_id": "A", "sample_index": 0, "verdict": "pass"}])
    for table in ("trajectories", "samples"):  # as version 1 wrote them: without the columns added since
        for path in s.shards(table):
            old = pq.read_table(path).drop_columns(list(S.table(table).added))
            pq.write_table(old.replace_schema_metadata({S.VERSION_KEY: b"1", S.TABLE_KEY: table.encode()}), path)
            relist(s, path, table)
    assert "verdict" not in pq.read_schema(s.shards("trajectories")[0]).names
    rows = s.rows("trajectories")
    assert [(r["traj_id"], r["verdict"], r["reason_code"]) for r in rows] == [("a", None, None), ("b", None, None)]
    assert s.rows("trajectories", ["traj_id", "verdict"]) == [{"traj_id": "a", "verdict": None}] + [
        {"traj_id": "b", "verdict": None}
    ]
    assert s.rows("samples")[0]["reason_code"] is None
    assert A.accepted_ids(s, "trajectories") == {"a"}
    out = invoke("sql", "-r", str(run_dir), "SELECT count(*) AS n FROM trajectories WHERE verdict IS NULL", "-f", "csv")
    assert out.output.splitlines()[-1] == "2"
    # a resumed old run gets new shards beside the old ones: both read, through pyarrow and DuckDB
    s.write("trajectories", "new", [_traj("c", "A", verdict="fail")])
    assert {r["traj_id"]: r["verdict"] for r in s.rows("trajectories")} == {"a": None, "b": None, "c": "fail"}
    assert A.accepted_ids(s, "trajectories") == {"a"}
    exported = tmp_path / "out.jsonl"
    invoke("export", str(exported), "--run", str(run_dir), "--format", "jsonl")
    assert [json.loads(line)["traj_id"] for line in exported.read_text().splitlines()] == ["a"]
