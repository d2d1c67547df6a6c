"""The run directory: shards, atomic writes, resume after SIGKILL, manifests, views, readers."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.toy_stage import TOY, ToyConfig, toy_rows
from trajkit import schema as S
from trajkit.errors import UserError
from trajkit.runner import run_stage
from trajkit.store import Store

ROOT = Path(__file__).resolve().parent.parent


def traj(i: int, tool: str = "add") -> dict:
    return {
        "traj_id": S.content_id("traj", i),
        "task_id": S.content_id("task", i % 3),
        "status": "completed",
        "messages": [
            {"role": "user", "content": f"compute {i}"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "name": tool, "arguments": json.dumps({"a": i})}],
            },
            {"role": "tool", "content": str(i), "tool_call_id": "c1", "name": tool},
            {"role": "assistant", "content": f"The answer is {i}."},
        ],
        "roles": ["user", "assistant", "tool", "assistant"],
        "tools_called": [tool],
        "num_turns": 2,
        "num_tool_calls": 1,
        "final_answer": f"The answer is {i}.",
        "token_ids": [1, 2, 3],
        "loss_mask": [0, 1, 1],
        "logprobs": [-0.5, -0.25],
    }


def test_write_read_roundtrip_and_shard_names(run_dir):
    store = Store(run_dir)
    w = store.writer("tasks", "import", rows_per_shard=4)
    w.write(toy_rows(10))
    w.close()
    names = [p.name for p in store.shards("tasks")]
    assert names == ["import-r0-000000.parquet", "import-r0-000001.parquet", "import-r0-000002.parquet"]
    data = store.read("tasks")
    assert data.num_rows == 10
    assert data.schema.metadata[S.VERSION_KEY] == b"1"
    assert data.column("source_id").to_pylist() == [f"toy/{i}" for i in range(10)]
    assert not list(run_dir.glob("*/.tmp-*"))


def run_toy_subprocess(run_dir: Path, n: int, sleep_s: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.toy_stage", str(run_dir), str(n), "7", str(sleep_s)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def shard_bytes(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((run_dir / "tasks").glob("*.parquet"))}


@pytest.mark.parametrize("kill_after_shards", [0, 2, 5])
def test_sigkill_then_resume_equals_uninterrupted_byte_for_byte(tmp_path, kill_after_shards):
    clean = tmp_path / "clean"
    run_stage(Store(clean, create=True), TOY, ToyConfig(n=60, shard_rows=7), quiet=True)

    killed = tmp_path / "killed"
    proc = run_toy_subprocess(killed, 60, 0.01)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if len(list((killed / "tasks").glob("*.parquet"))) >= kill_after_shards and (killed / "_stages").exists():
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "_stages" / "toy" / "_manifest.json").exists(), "killed before the manifest"

    resumed = run_toy_subprocess(killed, 60, 0.0)
    assert resumed.wait(timeout=60) == 0, resumed.stderr.read().decode()
    assert shard_bytes(killed) == shard_bytes(clean)
    ids = Store(killed).read("tasks", ["task_id"]).column(0).to_pylist()
    assert len(ids) == len(set(ids)) == 60
    assert (killed / "_stages" / "toy" / "_manifest.json").exists()


def test_a_rerun_fences_off_an_older_run_still_writing(tmp_path):
    """Two runs of one shard at once (a killed driver's task still alive, a second shell): the newer one takes
    the lease, the older one's next commit fails and its rows are discarded; the result is the uninterrupted one."""
    clean = tmp_path / "clean"
    run_stage(Store(clean, create=True), TOY, ToyConfig(n=60, shard_rows=7), quiet=True)

    raced = tmp_path / "raced"
    old = run_toy_subprocess(raced, 60, 0.05)  # 7 rows per shard: a commit every 0.35 s, 3 s in all
    deadline = time.monotonic() + 60
    while len(list((raced / "tasks").glob("*.parquet"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert old.poll() is None, "the older run must still be writing"
    run_stage(Store(raced), TOY, ToyConfig(n=60, shard_rows=7, sleep_s=0.0), quiet=True)
    assert old.wait(timeout=60) != 0
    assert "a newer run took this shard over" in old.stderr.read().decode()
    assert shard_bytes(raced) == shard_bytes(clean)
    assert not list(raced.glob("*/.tmp-*"))


def test_manifest_written_last_with_config_counts_and_version(run_dir):
    m = run_stage(Store(run_dir), TOY, ToyConfig(n=12, shard_rows=5), quiet=True)
    on_disk = json.loads((run_dir / "_stages" / "toy" / "_manifest.json").read_text())
    assert on_disk == m
    assert m["outputs"] == {"tasks": 12}
    assert m["counts"]["rows.tasks"] == 12
    assert m["config"] == {"n": 12, "shard_rows": 5, "sleep_s": 0.0}
    assert len(m["config_hash"]) == 16 and m["code_version"].startswith("0.1.0")
    # a complete stage is skipped on rerun, writing nothing more
    again = run_stage(Store(run_dir), TOY, ToyConfig(n=12, shard_rows=5), quiet=True)
    assert again == m and Store(run_dir).count("tasks") == 12


def test_resume_with_another_config_is_a_user_error_unless_fresh(run_dir):
    store = Store(run_dir)
    run_stage(store, TOY, ToyConfig(n=5), quiet=True)
    with pytest.raises(UserError, match="different config.*--fresh"):
        run_stage(store, TOY, ToyConfig(n=6), quiet=True)
    # fields marked hash=False (sleep) are not part of the identity
    run_stage(store, TOY, ToyConfig(n=5, sleep_s=0.001), quiet=True)
    m = run_stage(store, TOY, ToyConfig(n=6), fresh=True, quiet=True)
    assert m["outputs"] == {"tasks": 6} and store.count("tasks") == 6


def test_sharded_run_gives_the_same_rows_as_one(tmp_path):
    one = Store(tmp_path / "one", create=True)
    run_stage(one, TOY, ToyConfig(n=40), quiet=True)
    two = Store(tmp_path / "two", create=True)
    for rank in range(2):
        run_stage(two, TOY, ToyConfig(n=40), rank=rank, world_size=2, quiet=True)
    assert {p.name.split("-")[1] for p in two.shards("tasks")} == {"r0", "r1"}
    rows = lambda s: sorted(s.rows("tasks"), key=lambda r: r["task_id"])
    assert rows(one) == rows(two)
    assert two.manifest("toy", 0, 2) and two.manifest("toy", 1, 2)


def test_drop_rows_rewrites_only_the_stage_own_shards(run_dir):
    store = Store(run_dir)
    store.write(
        "trajectories", "rollouts", [traj(i) | {"status": "aborted" if i % 2 else "completed"} for i in range(6)]
    )
    store.write("trajectories", "other", [traj(100)])
    other_before = store.shards("trajectories", "other")[0].read_bytes()
    aborted = {traj(i)["traj_id"] for i in range(6) if i % 2}
    assert store.drop_rows("trajectories", "rollouts", aborted) == 3
    assert store.ids("trajectories", "rollouts") == {traj(i)["traj_id"] for i in (0, 2, 4)}
    assert store.shards("trajectories", "other")[0].read_bytes() == other_before


def test_only_listed_shards_are_data(run_dir):
    """A file no stage listed is left out and reported; a listed shard changed, truncated or lost is a user
    error naming it, whatever its row count (issue 41 item 3)."""
    store = Store(run_dir)
    store.write("tasks", "import", toy_rows(3))
    (shard,) = store.shards("tasks")
    for name, data in (("junk-r0-000000.parquet", b"this is not parquet"), ("copied.parquet", shard.read_bytes())):
        (run_dir / "tasks" / name).write_bytes(data)
        assert len(store.read("tasks")) == 3
        assert any(name in line and "no stage listed" in line for line in Store(run_dir).problems("tasks"))
        (run_dir / "tasks" / name).unlink()
    original = shard.read_bytes()
    flipped = pa.table(store.read("tasks")).set_column(1, "question", pa.array(["x", "y", "z"]))
    pq.write_table(flipped, shard)  # same rows, other content
    for damage in (lambda: None, lambda: shard.write_bytes(original[:200]), shard.unlink):
        damage()
        with pytest.raises(UserError, match=f"{shard.name}: (changed since|listed by its stage but missing)"):
            Store(run_dir).read("tasks")
        assert len(Store(run_dir).problems("tasks")) == 1
    shard.write_bytes(original)
    assert len(Store(run_dir).read("tasks")) == 3 and not Store(run_dir).problems("tasks")
    with pytest.raises(UserError, match="run directory not found"):
        Store(run_dir / "nope")


def test_a_run_written_before_shard_lists_reads_as_it_did_and_its_stages_are_redone(run_dir):
    """A stage an older trajkit completed (a manifest without ``shards``, no ledger) keeps its rows for every
    reader and is named by ``info``; resuming redoes it rather than vouch for it; a file named for a stage that
    lists its shards is still left out."""
    from tests.test_cli import invoke  # (test_cli imports this module)

    store = Store(run_dir)
    run_stage(store, TOY, ToyConfig(n=12, shard_rows=5), quiet=True)
    stage = store.stage_dir("toy")
    for ledger in stage.glob("_shards-r*.jsonl"):
        ledger.unlink()
    manifest = json.loads((stage / "_manifest.json").read_text())
    (stage / "_manifest.json").write_text(
        json.dumps({k: v for k, v in manifest.items() if k not in ("shards", "inputs")})
    )
    old = Store(run_dir)
    assert old.legacy_stages() == {"toy"} and old.count("tasks") == 12 and not old.problems()
    assert "stage 'toy' was written before stages listed their shards" in invoke("info", "--run", str(run_dir)).output
    store.write("tasks", "import", toy_rows(2))
    (run_dir / "tasks" / "import-r0-000001.parquet").write_bytes(store.shards("tasks", "import")[0].read_bytes())
    assert Store(run_dir).count("tasks") == 14 and len(Store(run_dir).problems()) == 1
    again = run_stage(Store(run_dir), TOY, ToyConfig(n=12, shard_rows=5), quiet=True)
    assert again["outputs"] == {"tasks": 12} and "shards" in again and not Store(run_dir).legacy_stages()


def test_validate_opens_a_shard_again_only_when_it_changed(run_dir, monkeypatch):
    store = Store(run_dir)
    store.write("tasks", "import", toy_rows(3))
    store.validate("tasks")
    opened = []
    real_open = store._open
    monkeypatch.setattr(store, "_open", lambda path, table: opened.append(path) or real_open(path, table))
    store.write("tasks", "more", toy_rows(2))
    assert store.validate("tasks") and opened == store.shards("tasks", "more")
    store.shards("tasks", "import")[0].write_bytes(b"this is not parquet")  # changed in place
    with pytest.raises(UserError, match="changed since its stage wrote it"):
        store.validate("tasks")


def test_duckdb_views_join_annotations_and_survive_absent_tables(run_dir):
    store = Store(run_dir)
    rows = toy_rows(4)
    store.write("tasks", "import", rows)
    ids = [r["task_id"] for r in rows]
    store.write(
        "passk", "passk", [{"task_id": ids[0], "samples": 4, "correct": 1, "pass_at_1": 0.25, "difficulty": "hard"}]
    )
    store.write("splits", "split", [{"task_id": t, "split": "train" if i else "held_out"} for i, t in enumerate(ids)])
    store.write(
        "rejected",
        "dedup",
        [{"reject_id": "r", "row_id": ids[3], "table_name": "tasks", "stage": "dedup", "reason": "near_duplicate"}],
    )
    got = store.sql("SELECT task_id, difficulty, split, stage, reject_reason FROM tasks ORDER BY source_id").to_pylist()
    assert got[0] == {
        "task_id": ids[0],
        "difficulty": "hard",
        "split": "held_out",
        "stage": None,
        "reject_reason": None,
    }
    assert got[3]["reject_reason"] == "near_duplicate"
    assert store.sql("SELECT count(*) AS n FROM trajectories").to_pylist() == [{"n": 0}]
    with pytest.raises(UserError, match="SQL error"):
        store.sql("SELECT nope FROM tasks")


def test_duckdb_polars_and_datasets_read_identical_rows(run_dir):
    import datasets
    import polars as pl

    store = Store(run_dir)
    store.write("trajectories", "rollouts", [traj(i, tool="add" if i % 2 else "mul") for i in range(20)])
    files = [str(p) for p in store.shards("trajectories")]
    cols = ["traj_id", "messages", "tools_called", "loss_mask", "logprobs"]
    via_duckdb = store.sql(f"SELECT {', '.join(cols)} FROM trajectories ORDER BY traj_id").to_pylist()
    via_polars = pl.scan_parquet(files).select(cols).sort("traj_id").collect().to_dicts()
    ds = datasets.load_dataset("parquet", data_files=files, split="train").select_columns(cols)
    via_datasets = sorted(ds.to_list(), key=lambda r: r["traj_id"])
    norm = lambda rows: json.loads(json.dumps(rows, sort_keys=True))  # float32 -> same python floats
    assert norm(via_duckdb) == norm(via_polars) == norm(via_datasets)
    assert via_duckdb[0]["messages"][1]["tool_calls"][0]["name"] in ("add", "mul")


def test_compaction_merges_a_stages_shards_keeping_rows_and_order_and_survives_a_kill(run_dir, monkeypatch):
    from trajkit import store as store_module

    store = Store(run_dir)
    w = store.writer("tasks", "gen", rows_per_shard=2)
    w.write([{"task_id": f"t{i}", "question": f"q{i}", "mode": "imported"} for i in range(7)])
    w.close()
    store.write("tasks", "other", [{"task_id": "o", "question": "q", "mode": "imported"}])
    before = store.read("tasks").to_pylist()
    assert len(store.shards("tasks", "gen")) == 4
    monkeypatch.setattr(store_module, "COMPACT_ROWS", 4)  # two compacted shards: t0-t3, t4-t6
    real_unlink = Path.unlink

    def killed(self, missing_ok=False):  # the compaction dies after its first rename
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "unlink", killed)
    with pytest.raises(KeyboardInterrupt):
        store.compact("tasks", "gen")
    monkeypatch.setattr(Path, "unlink", real_unlink)
    assert [p.name for p in store.shards("tasks", "gen")] == [
        "gen-r0-000000-000001.parquet",
        "gen-r0-000002.parquet",
        "gen-r0-000003.parquet",
    ]
    assert store.read("tasks").to_pylist() == before  # the covered shards are not read twice
    assert store.compact("tasks", "gen") == 4  # two merged, two covered leftovers removed
    assert [p.name for p in store.shards("tasks", "gen")] == [
        "gen-r0-000000-000001.parquet",
        "gen-r0-000002-000003.parquet",
    ]
    assert len(list((run_dir / "tasks").glob("gen-*"))) == 2
    assert (
        store.read("tasks").to_pylist() == before and store.sql("SELECT count(*) AS n FROM tasks")["n"][0].as_py() == 8
    )
    store.write("tasks", "gen", [{"task_id": "t7", "question": "q7", "mode": "imported"}])  # after the last merged
    assert store.shards("tasks", "gen")[-1].name == "gen-r0-000004.parquet"
    store.drop_stage("gen")
    assert [r["task_id"] for r in store.read("tasks").to_pylist()] == ["o"]


def ids_map_to_one_row(store: Store) -> None:
    """Every table's view holds one row per id, and ``trajkit show`` opens each task id it lists."""
    from tests.test_cli import invoke
    from trajkit import schema as S

    for name, table in S.TABLES.items():
        counted = store.sql(f'SELECT count(*) AS n, count(DISTINCT "{table.key}") AS ids FROM "{name}"').to_pylist()
        assert counted[0]["n"] == counted[0]["ids"], name
    for task in store.rows("tasks", ["task_id"]):
        assert "give more characters" not in invoke("show", task["task_id"], "-r", str(store.root)).output
