"""The plug-in points' signatures (trajkit.plugins) hold user code: a type checker passes the examples and flags
plug-ins that do not fit; each example runs through the loader its stage uses."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WRONG = "tests/fixtures/wrong_plugins.py"


def test_a_type_checker_passes_the_examples_and_flags_plugins_that_do_not_fit():
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "examples/plugins.py", WRONG],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert not [e for e in errors if not e.startswith(WRONG)], done.stdout  # the examples fit
    flagged = {int(re.match(rf"{WRONG}:(\d+):", e)[1]) for e in errors}
    declared = [i for i, line in enumerate((ROOT / WRONG).read_text().splitlines(), 1) if line.startswith("_")]
    assert flagged == set(declared) and len(declared) == 3, done.stdout  # every wrong declaration, nothing else


def test_the_examples_run_through_their_stages_loaders():
    from trajkit.curate.imports import custom_records
    from trajkit.envs.agent import load_rollout
    from trajkit.plugins import apply_filter, load_filters
    from trajkit.train.rewards import load_reward
    from trajkit.verify import verify

    [(name, fn)] = load_filters(["examples.plugins:no_lists"])
    assert apply_filter(name, fn, {"question": "Sort the list."}, "task", "t") == "mentions_list"
    assert asyncio.iscoroutinefunction(load_rollout("examples.plugins:careful_rollout"))
    reward = load_reward("examples.plugins:short_answers")
    assert reward(["p"], ["short", "x" * 201], completion_ids=None, trainer_state=None) == [1.0, 0.0]
    assert [r["answer"] for r in custom_records("examples.plugins:sums", {"count": 2})] == ["2", "4"]
    spec = json.dumps({"path": "examples.plugins:exact_answer", "answer": "42"})
    assert verify({"kind": "custom", "spec": spec}, " 42\n").verdict == "pass"


def test_the_guides_stage_runs_and_resumes(tmp_path, monkeypatch):
    """docs/extending.md's stage, as written there: it runs, and a rerun of it after a kill does only the rest."""
    from trajkit.config import build, load_object
    from trajkit.runner import run_stage
    from trajkit.store import Store

    guide = (ROOT / "docs" / "extending.md").read_text()
    code = guide.split("## Writing a stage", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "guide_stage.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = load_object("guide_stage:BY_LENGTH")
    store = Store(tmp_path / "run", create=True)
    questions = ["short?", "a question longer than forty characters, surely", "tiny", "mid-sized question"]
    store.write(
        "tasks", "import", [{"task_id": f"t{i}", "question": q, "mode": "imported"} for i, q in enumerate(questions)]
    )
    cfg = build(spec.config, {})
    run_stage(store, spec, cfg, name="by-length", quiet=True)
    splits = {r["task_id"]: r["split"] for r in store.rows("splits")}
    assert splits == {"t0": "held_out", "t1": "train", "t2": "held_out", "t3": "held_out"}
    store.drop_rows("splits", "by-length", {"t2"})  # as if killed before its last row
    store.manifest_path("by-length").unlink()
    again = run_stage(store, spec, cfg, name="by-length", quiet=True)
    assert again["counts"]["resumed"] == 3 and again["counts"]["rows.splits"] == 4
    assert {r["task_id"]: r["split"] for r in store.rows("splits")} == splits
