"""`eval.diversity`: the metrics on known inputs, and the stage with the bundled all-MiniLM-L6-v2 (offline)."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from trajkit.errors import UserError
from trajkit.eval import cli
from trajkit.eval.diversity import EVAL_DIVERSITY, DiversityConfig, distinct_n, self_bleu, semantic_diversity, tokenize
from trajkit.runner import run_stage
from trajkit.schema import content_id
from trajkit.store import Store

SAME = [f"What is the weather in Paris today{'?' * (i % 3 + 1)}" for i in range(6)]
VARIED = [
    "Convert 3 miles to kilometers.",
    "Which GitHub issues mention a memory leak in the parser?",
    "Add a calendar event for the dentist next Tuesday at 9am.",
    "What was Apple's closing stock price yesterday?",
    "Summarize the README of the trajkit repository.",
    "How many prime numbers are below one hundred?",
]


def test_semantic_diversity_is_one_minus_mean_pairwise_cosine():
    rng = np.random.default_rng(0)
    e = rng.normal(size=(7, 5))
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    sims = e @ e.T
    brute = 1 - sims[~np.eye(7, dtype=bool)].mean()
    assert semantic_diversity(e) == pytest.approx(brute)
    assert semantic_diversity(np.repeat(e[:1], 3, axis=0)) == pytest.approx(0.0, abs=1e-9)
    assert semantic_diversity(e[:1]) is None


def test_distinct_n_and_self_bleu():
    toks = [tokenize(t) for t in ["the cat sat", "the cat ran", "a dog ran"]]
    assert distinct_n(toks, 1) == 6 / 9  # the cat sat ran a dog
    assert distinct_n(toks, 2) == 5 / 6  # the-cat twice
    assert distinct_n([["x"]], 2) is None
    copies = [tokenize("the quick brown fox jumps over the lazy dog")] * 4
    assert self_bleu(copies) == pytest.approx(1.0)
    assert self_bleu([tokenize(t) for t in VARIED]) < 0.2
    assert self_bleu([tokenize(t) for t in SAME]) > 0.6


def _run(root) -> Store:
    store = Store(root, create=True)
    rows = [{"task_id": content_id("t", q), "question": q, "mode": "single_tool", "vs_method": "direct"} for q in SAME]
    rows += [
        {"task_id": content_id("t", q), "question": q, "mode": "single_tool", "vs_method": "vs_standard"}
        for q in VARIED
    ]
    store.write("tasks", "synth", rows)
    return store


def test_stage_per_group_and_overall(run_dir):
    store = _run(run_dir)
    summary = run_stage(
        store, EVAL_DIVERSITY, DiversityConfig(group_by="vs_method"), name="eval-diversity", quiet=True
    )["summary"]
    groups = {g["group"]: g for g in summary["groups"]}
    direct, varied = groups["direct"], groups["vs_standard"]
    assert direct["n"] == varied["n"] == 6 and summary["overall"]["n"] == 12
    assert direct["semantic_diversity"] < 0.15 and varied["semantic_diversity"] > 0.6
    assert direct["distinct_2"] < varied["distinct_2"] and direct["self_bleu"] > varied["self_bleu"]
    assert direct["semantic_diversity"] < summary["overall"]["semantic_diversity"]
    mean = summary["within_group_mean"]["semantic_diversity"]
    assert mean == pytest.approx((direct["semantic_diversity"] + varied["semantic_diversity"]) / 2, abs=1e-6)

    result = CliRunner().invoke(
        cli.app, ["diversity", "--run", str(run_dir), "--group-by", "vs_method"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert "vs_method = direct" in result.output and f"{varied['semantic_diversity']:.3f}" in result.output


def test_bad_column_is_a_user_error(run_dir):
    store = _run(run_dir)
    with pytest.raises(UserError, match="cannot read tasks.nope"):
        run_stage(store, EVAL_DIVERSITY, DiversityConfig(column="nope"), name="d", quiet=True)
    with pytest.raises(UserError, match="unknown table"):
        run_stage(store, EVAL_DIVERSITY, DiversityConfig(table="nope"), name="d2", quiet=True)
