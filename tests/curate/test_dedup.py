"""curate.dedup: exact and MinHash near-duplicate clusters, the kept row, rejected rows."""

from __future__ import annotations

import random

import pytest

from tests.curate.helpers import run, task
from trajkit.curate.dedup import find_duplicates
from trajkit.curate.minhash import LSHParams, near_duplicate_pairs, optimal_bands
from trajkit.curate.ngrams import tokenize
from trajkit.errors import UserError
from trajkit.store import Store

QUESTIONS = {
    "q1": "Write a function that takes a list of integers and returns the sum of the squares of the odd numbers "
    "in the list, ignoring negative numbers and returning zero for an empty list of integers.",
    "q2": "write a function that takes a list of integers and returns the SUM of the squares of the odd numbers "
    "in the list,   ignoring negative numbers and returning zero for an empty list of integers.",  # exact (case, spacing)
    "q3": "Write a function that takes a list of integers and returns the sum of the squares of the odd numbers "
    "in the list, ignoring negative numbers and returning zero for an empty list of ints.",  # near
    "q4": "What is 2+3?",
    "q5": "What is 2*3?",  # differs only by a symbol: not a duplicate
    "q6": "what   is 2 +3 ?",  # exact duplicate of q4 (spacing)
    "q7": "Explain how a hash map handles collisions with open addressing and linear probing.",
}


def _corpus(n: int, seed: int = 0) -> tuple[list[str], list[tuple[int, int]]]:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(5000)]
    docs = [[rng.choice(vocab) for _ in range(rng.randint(25, 40))] for _ in range(n)]
    pairs = []
    for i in rng.sample(range(n), n // 10):
        copy = list(docs[i])
        copy[rng.randrange(len(copy))] = "changed"
        docs.append(copy)
        pairs.append((i, len(docs) - 1))
    return [" ".join(d) for d in docs], pairs


def test_near_duplicate_pairs_find_planted_copies_and_nothing_else():
    texts, planted = _corpus(2000)
    found = {tuple(p) for p in near_duplicate_pairs(tokenize(texts), LSHParams(threshold=0.7)).tolist()}
    assert sum(p in found for p in planted) >= 0.9 * len(planted)  # MinHash LSH is approximate
    assert found <= set(planted)  # random 5000-word-vocabulary texts never collide


def test_optimal_bands_follow_the_threshold():
    assert optimal_bands(0.9, 128) < optimal_bands(0.7, 128) < optimal_bands(0.3, 128)
    assert all(128 % optimal_bands(t, 128) == 0 for t in (0.2, 0.5, 0.8))


def test_clusters_keep_the_smallest_id_and_ignore_order():
    ids = sorted(QUESTIONS)
    texts = [QUESTIONS[i] for i in ids]
    found = find_duplicates(texts, ids, LSHParams(threshold=0.7))
    kept = {ids[i]: ids[k] for i, k in enumerate(found.kept)}
    assert kept == {"q1": "q1", "q2": "q1", "q3": "q1", "q4": "q4", "q5": "q5", "q6": "q4", "q7": "q7"}
    assert [ids[i] for i in found.exact_rep] == ["q1", "q1", "q3", "q4", "q5", "q4", "q7"]
    order = list(range(len(ids)))
    random.Random(1).shuffle(order)
    shuffled = find_duplicates([texts[i] for i in order], [ids[i] for i in order], LSHParams(threshold=0.7))
    assert {ids[order[i]]: ids[order[k]] for i, k in enumerate(shuffled.kept)} == kept


def test_stage_writes_every_task_and_rejects_the_duplicates(run_dir):
    store = Store(run_dir)
    store.write("tasks", "synth", [task(k, v) for k, v in QUESTIONS.items()])
    m = run(store, "curate.dedup")
    dedup = {r["task_id"]: r for r in store.rows("dedup")}
    assert len(dedup) == len(QUESTIONS)
    ids = {k: task(k, v)["task_id"] for k, v in QUESTIONS.items()}
    kept13 = min(ids["q1"], ids["q2"], ids["q3"])
    assert {dedup[ids[q]]["cluster_id"] for q in ("q1", "q2", "q3")} == {kept13}
    assert dedup[ids["q1"]]["cluster_size"] == 3 and dedup[ids["q5"]]["cluster_size"] == 1
    rejected = {r["row_id"]: (r["reason"], r["detail"]) for r in store.rows("rejected")}
    assert len(rejected) == 3 and all(d == dedup[t]["cluster_id"] for t, (_, d) in rejected.items())
    assert {t for t, r in dedup.items() if r["duplicate"]} == set(rejected)
    first12 = min(ids["q1"], ids["q2"])  # of q1 and q2 (same text) the larger id is an exact duplicate
    assert rejected[max(ids["q1"], ids["q2"])][0] == "exact_duplicate"
    if kept13 != first12:
        assert rejected[first12][0] == "near_duplicate"
    assert rejected[ids["q6"]] == ("exact_duplicate", ids["q4"])
    assert {rejected[ids[q]][0] for q in ("q1", "q2", "q3") if ids[q] != kept13} <= {
        "exact_duplicate",
        "near_duplicate",
    }
    assert m["summary"]["tasks"] == 7 and m["summary"]["clusters"] == 4
    assert m["counts"]["rejected.exact_duplicate"] + m["counts"]["rejected.near_duplicate"] == 3
    view = store.sql("SELECT count(*) AS n FROM tasks WHERE reject_reason IS NULL").to_pylist()
    assert view == [{"n": 4}]


def test_cluster_only_keeps_near_duplicates_and_later_stages_skip_rejected(run_dir):
    store = Store(run_dir)
    store.write("tasks", "synth", [task(k, v) for k, v in QUESTIONS.items()])
    store.write(
        "rejected",
        "judge",
        [
            {
                "reject_id": "x",
                "row_id": task("q7", "")["task_id"],
                "table_name": "tasks",
                "stage": "judge",
                "reason": "low_quality",
            }
        ],
    )
    run(store, "curate.dedup", reject_near_duplicates=False)
    ids = {k: task(k, v)["task_id"] for k, v in QUESTIONS.items()}
    rejected = {r["row_id"]: (r["reason"], r["detail"]) for r in store.rows("rejected", stage="dedup")}
    # exact duplicates still go, each pointing at the first of its text; near ones are only clustered
    assert rejected == {
        max(ids["q1"], ids["q2"]): ("exact_duplicate", min(ids["q1"], ids["q2"])),
        ids["q6"]: ("exact_duplicate", ids["q4"]),
    }
    clusters = {r["task_id"]: r["cluster_id"] for r in store.rows("dedup")}
    assert clusters[ids["q1"]] == clusters[ids["q2"]] == clusters[ids["q3"]] == min(ids["q1"], ids["q2"], ids["q3"])
    assert len(store.rows("dedup")) == 6  # q7 was rejected before dedup ran


def test_bad_lsh_config_is_a_user_error(run_dir):
    with pytest.raises(UserError, match="multiple of bands"):
        run(Store(run_dir), "curate.dedup", num_perm=100, bands=16)


def test_empty_and_missing_questions_are_one_exact_cluster():
    found = find_duplicates(["", None, "a b c"], ["a", "b", "c"], LSHParams())
    assert found.kept.tolist() == [0, 0, 2] and found.exact_rep.tolist() == [0, 0, 2]


def test_two_shards_write_the_same_rows_as_one(tmp_path):
    from trajkit.config import build
    from trajkit.curate.dedup import DEDUP
    from trajkit.runner import run_stage

    texts, _ = _corpus(300)
    rows = [task(f"d{i}", t) for i, t in enumerate(texts)]
    one, two = Store(tmp_path / "one", create=True), Store(tmp_path / "two", create=True)
    for store in (one, two):
        store.write("tasks", "synth", rows)
    cfg = build(DEDUP.config, {})
    run_stage(one, DEDUP, cfg, quiet=True)
    for rank in (0, 1):
        run_stage(two, DEDUP, cfg, quiet=True, rank=rank, world_size=2)
    for table in ("dedup", "rejected"):
        a = sorted(map(str, one.rows(table)))
        b = sorted(map(str, two.rows(table)))
        assert a == b and len(a) > 0
