"""curate.split: held-out by cluster hash; curate.curriculum: stages, phases, weights, resampling."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.curate.helpers import run, task
from trajkit.curate.curriculum import CurriculumConfig, plan
from trajkit.curate.splits import side
from trajkit.errors import UserError
from trajkit.store import Store


def _dedup_row(tid: str, cluster: str) -> dict:
    return {"task_id": tid, "cluster_id": cluster, "cluster_size": 1, "duplicate": False}


def test_side_is_a_stable_hash_with_the_requested_fraction():
    sides = Counter(side(f"c{i}", 0.2, "s") for i in range(5000))
    assert 0.17 < sides["held_out"] / 5000 < 0.23
    assert side("c1", 0.2, "s") == side("c1", 0.2, "s")
    assert {side(f"c{i}", 0.0, "s") for i in range(100)} == {"train"} and {
        side(f"c{i}", 1.0, "s") for i in range(100)
    } == {"held_out"}


def test_split_keeps_dedup_clusters_on_one_side(run_dir):
    store = Store(run_dir)
    tasks = [task(f"t{i}", f"question {i}") for i in range(400)]
    store.write("tasks", "synth", tasks)
    # clusters of four tasks each, as a cluster-only dedup leaves them
    store.write("dedup", "dedup", [_dedup_row(t["task_id"], f"cluster{i // 4}") for i, t in enumerate(tasks)])
    store.write(
        "rejected",
        "judge",
        [{"reject_id": "r", "row_id": tasks[0]["task_id"], "table_name": "tasks", "stage": "judge", "reason": "bad"}],
    )
    m = run(store, "curate.split", held_out=0.3)
    split = {r["task_id"]: r["split"] for r in store.rows("splits")}
    assert len(split) == 399 and tasks[0]["task_id"] not in split
    by_cluster: dict[int, set] = {}
    for i, t in enumerate(tasks[1:], 1):
        by_cluster.setdefault(i // 4, set()).add(split[t["task_id"]])
    assert all(len(s) == 1 for s in by_cluster.values())
    held = sum(s == {"held_out"} for s in by_cluster.values())
    assert 15 < held < 45  # ~30% of 100 clusters
    assert m["counts"]["split.held_out"] + m["counts"]["split.train"] == 399
    got = store.sql("SELECT split, count(*) AS n FROM tasks WHERE split IS NOT NULL GROUP BY 1 ORDER BY 1").to_pylist()
    assert sum(r["n"] for r in got) == 399


def test_split_without_dedup_hashes_task_ids(run_dir):
    store = Store(run_dir)
    tasks = [task(f"t{i}", f"q{i}") for i in range(50)]
    store.write("tasks", "synth", tasks)
    run(store, "curate.split", held_out=0.5, seed="x")
    split = {r["task_id"]: r["split"] for r in store.rows("splits")}
    assert all(split[t["task_id"]] == side(t["task_id"], 0.5, "x") for t in tasks)


def _tasks(spec: dict[tuple[str, str], int]) -> list[dict]:
    """Train tasks: (source, difficulty) -> count, with pass@1 falling with the index."""
    out = []
    p1 = {"hard": 0.2, "medium": 0.5, "easy": 0.8, "unsolved": 0.0, "trivial": 1.0}
    for (source, diff), n in spec.items():
        for i in range(n):
            out.append(
                {
                    "task_id": f"{source}-{diff}-{i:03d}",
                    "source": source,
                    "difficulty": diff,
                    "pass_at_1": p1[diff] - i / 1000,
                }
            )
    return out


def test_plan_splits_hard_pool_and_weights_broad_uniformly():
    tasks = _tasks(
        {
            ("a", "hard"): 10,
            ("a", "medium"): 30,
            ("b", "medium"): 10,
            ("a", "easy"): 20,
            ("a", "unsolved"): 5,
            ("b", "trivial"): 5,
        }
    )
    rows, counts = plan(tasks, CurriculumConfig(hard_phases=[6, 2]))
    by = {r["task_id"]: r for r in rows}
    assert len(rows) == 70  # unsolved and trivial are out
    hard = [r for r in rows if r["stage"] == "hard"]
    assert len(hard) == 10 and {r["rollouts_per_prompt"] for r in hard} == {16}
    # hardest = lowest pass@1 = highest index here
    assert (
        by["a-hard-009"]["phase"] == 2
        and by["a-hard-008"]["phase"] == 2
        and by["a-hard-004"]["phase"] == 1
        and by["a-hard-003"]["phase"] == 0
    )
    broad = [r for r in rows if r["stage"] == "broad"]
    assert {r["rollouts_per_prompt"] for r in broad} == {8} and {r["phase"] for r in broad} == {0}
    mass = Counter()
    for r in broad:
        mass[r["task_id"].split("-")[1]] += r["weight"]
    assert mass["medium"] == pytest.approx(mass["easy"])  # hard bucket is empty in broad: its share is spread
    src = Counter()
    for r in broad:
        if "medium" in r["task_id"]:
            src[r["task_id"][0]] += r["weight"]
    assert src["a"] == pytest.approx(src["b"])  # sources equal within a difficulty
    assert sum(r["weight"] for r in broad) == pytest.approx(len(broad))
    assert counts["curriculum.empty.hard"] == 1


def test_plan_resamples_to_a_target_histogram_and_upweights_short_buckets():
    tasks = _tasks({("a", "hard"): 30, ("a", "medium"): 100, ("b", "medium"): 100, ("a", "easy"): 10})
    cfg = CurriculumConfig(hard_size=10, broad_size=100, target={"hard": 0.2, "medium": 0.5, "easy": 0.3})
    rows, counts = plan(tasks, cfg)
    broad = [r for r in rows if r["stage"] == "broad"]
    per = Counter(r["task_id"].split("-")[1] for r in broad)
    assert per == {"hard": 20, "medium": 50, "easy": 10}  # easy is short: 10 of 30
    assert counts["curriculum.short.easy"] == 20 and counts["curriculum.resampled_out"] == 150
    medium_sources = Counter(r["task_id"][0] for r in broad if "medium" in r["task_id"])
    assert medium_sources == {"a": 25, "b": 25}  # round-robin across sources
    mass = Counter()
    for r in broad:
        mass[r["task_id"].split("-")[1]] += r["weight"]
    total = sum(mass.values())
    assert mass["easy"] / total == pytest.approx(0.3) and mass["hard"] / total == pytest.approx(0.2)
    hard = sorted((r for r in rows if r["stage"] == "hard"), key=lambda r: r["task_id"])
    assert [r["task_id"] for r in hard] == [f"a-hard-{i:03d}" for i in range(20, 30)]  # the 10 hardest
    assert not {r["task_id"] for r in hard} & {r["task_id"] for r in broad}


def test_curriculum_stage_reads_splits_and_passk(run_dir):
    store = Store(run_dir)
    tasks = [task(f"t{i}", f"q{i}", source="s1" if i % 2 else "s2") for i in range(40)]
    store.write("tasks", "synth", tasks)
    diffs = ["hard", "medium", "easy", "trivial"]
    store.write(
        "passk",
        "passk",
        [
            {"task_id": t["task_id"], "samples": 4, "correct": 1, "pass_at_1": 0.25, "difficulty": diffs[i % 4]}
            for i, t in enumerate(tasks[:36])
        ],
    )
    with pytest.raises(UserError, match="curate split"):
        run(store, "curate.curriculum")
    run(store, "curate.split", held_out=0.25)
    m = run(store, "curate.curriculum", name="cur", broad_name="wide", hard_name="deep", hard_rollouts=32)
    rows = store.rows("curriculum")
    train = {r["task_id"] for r in store.rows("splits") if r["split"] == "train"}
    assert rows and {r["task_id"] for r in rows} <= train
    assert {r["stage"] for r in rows} == {"wide", "deep"} and {
        r["rollouts_per_prompt"] for r in rows if r["stage"] == "deep"
    } == {32}
    missing = len(train & {t["task_id"] for t in tasks[36:]})
    assert m["counts"]["curriculum.no_difficulty"] == missing and missing
    assert m["summary"]["note"].startswith(f"{missing} train task(s) have no difficulty and are left out")
    view = store.sql(
        "SELECT stage, difficulty, count(*) AS n FROM tasks WHERE stage IS NOT NULL GROUP BY ALL ORDER BY ALL"
    ).to_pylist()
    assert {(r["stage"], r["difficulty"]) for r in view} == {("deep", "hard"), ("wide", "medium"), ("wide", "easy")}


def test_curriculum_config_is_validated():
    with pytest.raises(ValueError, match="strictly decreasing"):
        CurriculumConfig(hard_phases=[10, 20])
    with pytest.raises(ValueError, match="outside broad_difficulties"):
        CurriculumConfig(target={"trivial": 1.0})


def test_held_out_zero_says_no_held_out_split_was_made(run_dir):
    from typer.testing import CliRunner

    from trajkit.cli import app

    Store(run_dir).write("tasks", "synth", [task(f"t{i}", f"q{i}") for i in range(5)])
    result = CliRunner().invoke(app, ["curate", "split", "--run", str(run_dir), "--held-out", "0"])
    assert result.exit_code == 0, result.output
    assert "no held-out split was made (--held-out 0): every task is train" in " ".join(result.output.split())
    assert "no held-out split" in Store(run_dir).manifests()[-1]["summary"]["note"]
    assert "note" not in run(Store(run_dir), "curate.split", name="half", held_out=0.5, seed="x")["summary"]
