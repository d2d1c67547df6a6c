"""The accepted definition: stage rejections, status, verdicts, judge thresholds, human reviews."""

from __future__ import annotations

import json

import pyarrow as pa
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


def test_export_reads_labels_to_include_or_exclude_rows(store, tmp_path):
    from tests.test_cli import invoke
    from tests.test_user_errors import user_error

    (store.root / A.LABELS_FILE).write_text(LABELS)
    out = tmp_path / "out.jsonl"

    def exported(*flags: str) -> list[str]:
        invoke("export", str(out), "--run", str(store.root), "--format", "jsonl", *flags)
        return [json.loads(line)["traj_id"] for line in out.read_text().splitlines()]

    assert exported() == ["human", "ok", "taskout"]
    A.add_review(store, "taskout", "trajectory", None, labels=["hallucination"], reviewer="ann")
    A.add_review(store, "ok", "trajectory", "accept", labels=["gold"], reviewer="ann")
    A.add_review(store, "vfail", "trajectory", None, labels=["gold"], reviewer="ann")
    assert exported() == ["human", "ok"]  # hallucination excludes
    assert exported("--all", "--label", "gold") == ["ok", "vfail"]
    assert exported("--all", "--without-label", "gold", "--without-label", "hallucination") == [
        "filtered",
        "human",
        "lowjudge",
        "trunc",
    ]
    line = user_error("export", str(out), "--run", str(store.root), "--label", "nope")
    assert line == "--label/--without-label: no label 'nope' in the run (labels: gold, hallucination)"


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


LABELS = """labels:
  - {name: hallucination, key: h, color: "#c0392b", excludes: true}
  - {name: gold, key: g, color: "#2a7"}
"""


def test_a_label_marked_excludes_takes_rows_out_of_the_accepted_data(store):
    (store.root / A.LABELS_FILE).write_text(LABELS)
    assert [label.name for label in A.run_labels(store.root)] == ["hallucination", "gold"]
    A.add_review(store, "ok", "trajectory", None, labels=["gold"], reviewer="ann")
    assert "ok" in A.accepted_ids(store, "trajectories")  # a label that does not exclude
    A.add_review(store, "ok", "trajectory", "accept", labels=["hallucination", "gold"], reviewer="ann")
    assert "ok" not in A.accepted_ids(store, "trajectories")  # accepted, yet labelled out
    A.add_review(store, "A", "task", None, labels=["hallucination"], reviewer="ann")
    assert "A" not in A.accepted_ids(store, "tasks") and "s4" not in A.accepted_ids(store, "samples")
    (store.root / A.LABELS_FILE).write_text(LABELS.replace("excludes: true", "excludes: false"))
    assert "ok" in A.accepted_ids(store, "trajectories")  # the file decides, for reviews written before too
    with pytest.raises(UserError, match="no label 'nope' in the run's labels.yaml"):
        A.add_review(store, "ok", "trajectory", "accept", labels=["nope"])


@pytest.mark.parametrize(
    "text, message",
    [
        ("labels: [", "not readable YAML"),
        ("- {name: x, key: x, color: '#fff'}", "expected one key, labels"),
        ("labels:\n  - {name: x, key: x}", "label 1: give name, key and color"),
        ("labels:\n  - {name: x, key: x, color: '#fff', colour: red}", "label 1: give name, key and color"),
        ("labels:\n  - {name: Bad Name, key: x, color: '#fff'}", "name 'Bad Name' is not 1-40"),
        ("labels:\n  - {name: x, key: a, color: '#fff'}", "key 'a' is not one lowercase letter or digit of its own"),
        ("labels:\n  - {name: x, key: xy, color: '#fff'}", "key 'xy' is not one"),
        ("labels:\n  - {name: x, key: x, color: red}", "color 'red' is not #rgb or #rrggbb"),
        ("labels:\n  - {name: x, key: x, color: '#fff', excludes: yes please}", "excludes must be true or false"),
        ("labels:\n  - {name: x, key: x, color: '#fff'}\n  - {name: y, key: x, color: '#fff'}", "key 'x' is also"),
    ],
)
def test_a_bad_labels_file_is_one_line_naming_the_problem(run_dir, text, message):
    (run_dir / A.LABELS_FILE).write_text(text)
    with pytest.raises(UserError, match=message) as e:
        A.run_labels(run_dir)
    assert "\n" not in str(e.value) and str(run_dir / A.LABELS_FILE) in str(e.value)


def test_a_batch_is_one_shard_and_its_undo_restores_each_rows_state_before_it(store):
    (store.root / A.LABELS_FILE).write_text(LABELS)
    A.add_review(store, "ok", "trajectory", "accept", "fine", "ann", labels=["gold"])
    A.add_review(store, "trunc", "trajectory", "accept", reviewer="ann")
    A.add_review(store, "trunc", "trajectory", "reject", reviewer="ann")
    targets = ["ok", "trunc", "lowjudge"]
    batch = A.add_reviews(store, "trajectory", targets, [A.ReviewState("reject")] * 3, "bob")
    assert len(store.shards("reviews")) == 4  # three single reviews, one batch
    in_batch = [r for r in store.rows("reviews") if r["batch_id"] == batch]
    assert sorted(r["target_id"] for r in in_batch) == sorted(targets) and {r["reviewer"] for r in in_batch} == {"bob"}
    assert "ok" not in A.accepted_ids(store, "trajectories")
    A.add_review(store, "lowjudge", "trajectory", "accept", reviewer="cat")  # reviewed again after the batch
    undo, restored, left = A.undo_batch(store, batch, "bob")
    assert (restored, left) == (2, 1)
    state = {
        r["target_id"]: (r["decision"], r["labels"], r["note"], r["reviewer"])
        for r in store.sql(f"SELECT * FROM reviews QUALIFY {A._LATEST}").to_pylist()
    }
    assert state == {
        "ok": ("accept", ["gold"], "fine", "bob"),  # as before the batch
        "trunc": ("reject", None, None, "bob"),
        "lowjudge": ("accept", None, None, "cat"),  # the later review stays
    }
    assert "ok" in A.accepted_ids(store, "trajectories") and len(store.rows("reviews")) == 3 + 3 + 1 + 2
    A.undo_batch(store, undo, "bob")  # an undo is a batch too: undoing it puts the batch's state back
    assert A.latest_reviews(store) == {"ok": "reject", "trunc": "reject", "lowjudge": "accept"}
    with pytest.raises(UserError, match="no review batch 'nope'"):
        A.undo_batch(store, "nope")


def test_an_undo_returns_a_row_never_reviewed_to_unreviewed(store):
    batch = A.add_reviews(store, "task", ["A", "B"], [A.ReviewState("reject")] * 2, "bob")
    assert A.accepted_ids(store, "tasks") == set()
    A.undo_batch(store, batch, "bob")
    latest = store.sql(f"SELECT target_id, decision, labels FROM reviews QUALIFY {A._LATEST} ORDER BY 1").to_pylist()
    assert latest == [{"target_id": t, "decision": None, "labels": None} for t in ("A", "B")]
    assert A.accepted_ids(store, "tasks") == {"A", "B"}


def test_reviews_written_before_labels_read_unchanged(store):
    import pyarrow.parquet as pq

    from tests.toy_stage import relist
    from trajkit import schema as S

    A.add_review(store, "human", "trajectory", "reject", "old", reviewer="ann")
    (path,) = store.shards("reviews")
    old = pq.read_table(path).drop_columns(["labels", "batch_id"])  # as version 1 wrote it: decision required
    fields = [f.with_nullable(f.name != "note") for f in old.schema]
    old = old.cast(pa.schema(fields)).replace_schema_metadata({S.VERSION_KEY: b"1", S.TABLE_KEY: b"reviews"})
    pq.write_table(old, path)
    relist(store, path, "reviews")
    assert "human" not in A.accepted_ids(store, "trajectories")
    A.add_review(store, "ok", "trajectory", "reject", reviewer="bob")  # a new shard beside the old one
    rows = {r["target_id"]: (r["decision"], r["labels"], r["batch_id"]) for r in store.rows("reviews")}
    assert rows == {"human": ("reject", None, None), "ok": ("reject", None, None)}
    assert A.accepted_ids(store, "trajectories") == {"taskout"}
