"""curate.decontaminate: 13-gram overlap with HumanEval, BFCL and user eval sets."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.curate.helpers import run, task, write_jsonl
from trajkit.curate.decontaminate import NgramIndex
from trajkit.curate.evalsets import EvalSet, bfcl_files, bfcl_texts, humaneval_texts
from trajkit.errors import UserError
from trajkit.store import Store

CLEAN = (
    "Plan a three day hiking trip in the Alps and list the huts where we can stay overnight on each day of the route."
)
BFCL_FIRST = "Find the area of a triangle with a base of 10 units and height of 5 units."


def test_ngram_index_reports_the_eval_set_and_the_first_shared_ngram():
    index = NgramIndex(n=5)
    index.add("evalA", ["The quick brown fox jumps over the lazy dog today"])
    index.add("evalB", ["completely different words that share nothing here at all"])
    found = index.match(["Look: the QUICK brown fox, jumps over something", CLEAN, None, "quick brown fox"])
    assert found[0].eval_set == "evalA" and found[0].ngram == "the quick brown fox jumps"
    assert found[1:] == [None, None, None]  # shorter than n words: no n-gram at all


def test_builtin_eval_sets_load_from_the_installed_wheels():
    he = humaneval_texts()
    assert len(he) == 2 * 164 and he[0].startswith("from typing import List")
    names = {p.name for p in bfcl_files()}
    assert "BFCL_v4_simple_python.json" in names and "BFCL_v4_multi_turn_base.json" in names
    texts = bfcl_texts()
    assert BFCL_FIRST in texts and len(texts) > 3000


def test_stage_rejects_contaminated_tasks_and_names_the_overlap(run_dir):
    store = Store(run_dir)
    run(store, "curate.import", preset="humaneval", limit=3, source="copied")  # HumanEval under another name
    bfcl_like = "Please help: " + BFCL_FIRST.replace("units.", "units, and explain the formula.")
    store.write("tasks", "synth", [task("clean", CLEAN), task("bfcl", bfcl_like)])
    m = run(store, "curate.decontaminate")
    rejected = {r["row_id"]: r for r in store.rows("rejected")}
    assert len(rejected) == 4 and task("clean", CLEAN)["task_id"] not in rejected
    bfcl = rejected[task("bfcl", bfcl_like)["task_id"]]
    assert bfcl["reason"] == "contaminated" and bfcl["stage"] == "decontaminate"
    assert bfcl["detail"] == 'bfcl: "find the area of a triangle with a base of 10 units and"'  # 13 words
    assert m["counts"]["contaminated.humaneval"] == 3 and m["counts"]["rejected.contaminated"] == 4
    assert m["summary"]["eval_ngrams"]["bfcl"] > 10_000


def test_tasks_imported_from_an_eval_set_are_checked_against_the_others_only(run_dir, tmp_path):
    store = Store(run_dir)
    run(store, "curate.import", preset="humaneval", limit=3)  # source humaneval: the built-in set itself
    other = write_jsonl(tmp_path / "other.jsonl", [{"question": CLEAN}])
    copied = task("c", "Please help: " + CLEAN, source="humaneval")  # imported from "humaneval", yet the other's
    synthesized = {**task("s", he_prompt(0)), "mode": "single_tool", "source": "humaneval"}
    store.write("tasks", "synth", [copied, synthesized])
    m = run(store, "curate.decontaminate", evals=["humaneval", str(other)])
    rejected = {r["row_id"]: r["detail"].split(":")[0] for r in store.rows("rejected")}
    assert rejected == {copied["task_id"]: "other", synthesized["task_id"]: "humaneval"}
    assert m["counts"]["own_source.humaneval"] == 4 and m["counts"]["contaminated.humaneval"] == 1


def he_prompt(i: int) -> str:
    return humaneval_texts()[2 * i]


def test_user_eval_sets_from_jsonl_parquet_and_datasets_dirs(run_dir, tmp_path):
    import datasets

    secret = [
        "which route do arctic terns follow when they migrate from greenland to the weddell sea each year",
        "how many moons of jupiter were discovered by galileo galilei with his first small telescope in padua",
        "why does bread dough rise faster in a warm kitchen than in a cold cellar during the winter months",
    ]
    write_jsonl(tmp_path / "ev.jsonl", [{"prompt": secret[0]}])
    pq.write_table(pa.table({"body": [json.dumps({"messages": [{"content": secret[1]}]})]}), tmp_path / "ev.parquet")
    datasets.DatasetDict({"test": datasets.Dataset.from_dict({"question": [secret[2]]})}).save_to_disk(
        str(tmp_path / "evds")
    )
    store = Store(run_dir)
    store.write(
        "tasks",
        "synth",
        [task(f"s{i}", f"Here is one: {s}. Answer briefly.") for i, s in enumerate(secret)] + [task("c", CLEAN)],
    )
    evals = [
        str(tmp_path / "ev.jsonl"),
        {"name": "pq", "path": str(tmp_path / "ev.parquet"), "fields": ["body"]},
        f"dsdir={tmp_path / 'evds'}",
    ]
    run(store, "curate.decontaminate", evals=evals, n=8)
    details = sorted(r["detail"].split(":")[0] for r in store.rows("rejected"))
    assert details == ["dsdir", "ev", "pq"]


def test_fields_beyond_the_question_are_checked(run_dir):
    he = humaneval_texts()
    solution = he[1]  # the canonical solution of HumanEval/0
    store = Store(run_dir)
    store.write("tasks", "synth", [task("x", CLEAN, metadata=json.dumps({"solution": solution}))])
    run(store, "curate.decontaminate", evals=["humaneval"])
    assert store.count("rejected") == 0
    run(store, "curate.decontaminate", name="deep", evals=["humaneval"], fields=["question", "metadata"], n=10)
    assert [r["detail"].split(":")[0] for r in store.rows("rejected")] == ["humaneval"]


def test_eval_set_specs_are_validated():
    assert EvalSet.model_validate("bfcl") == EvalSet(name="bfcl")
    assert EvalSet.model_validate("a/b/mine.jsonl.gz") == EvalSet(name="mine", path="a/b/mine.jsonl.gz")
    with pytest.raises(ValueError, match="not built in"):
        EvalSet.model_validate({"name": "mmlu"})


def test_unknown_text_fields_are_a_user_error(run_dir, tmp_path):
    write_jsonl(tmp_path / "odd.jsonl", [{"foo": "bar"}])
    store = Store(run_dir)
    store.write("tasks", "synth", [task("c", CLEAN)])
    with pytest.raises(UserError, match="name the text fields"):
        run(store, "curate.decontaminate", evals=[str(tmp_path / "odd.jsonl")])
