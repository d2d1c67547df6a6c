"""bench/curriculum.py's CPU version: every trajkit stage of the curriculum ablation, a tiny model, a few steps."""

from __future__ import annotations

import json
import sys

from bench import curriculum
from trajkit.store import Store


def test_curriculum_bench_runs_every_stage_at_equal_completions(tmp_path, monkeypatch, capsys):
    out = tmp_path / "seed0"
    monkeypatch.setattr(sys, "argv", ["curriculum.py", "--tiny", "--seeds", "0", "--out", str(out)])
    curriculum.main()
    (result,) = json.loads((out / "results.json").read_text())
    store = Store(out / "run")

    # the task family: four carry levels, imported with a custom verifier; a fifth held out
    tasks = store.rows("tasks")
    levels = [json.loads(t["metadata"])["level"] for t in tasks]
    assert sorted(set(levels)) == [0, 1, 2, 3] and len(tasks) == 4 * result["settings"]["per_level"]
    split = {r["task_id"]: r["split"] for r in store.rows("splits")}
    # the warm start saw reference solutions of train tasks of the easier half only
    refs = store.rows("trajectories", stage="reference")
    by_id = {t["task_id"]: t for t in tasks}
    assert refs and all(split[r["task_id"]] == "train" for r in refs)
    assert all(json.loads(by_id[r["task_id"]]["metadata"])["level"] in (0, 1) for r in refs)
    assert all(
        curriculum.exact_answer(r["messages"][-1]["content"], json.loads(by_id[r["task_id"]]["verifier"]["spec"]), {})
        for r in refs
    )

    # --ref-noise: a share of the answers one off, chosen by task hash
    noisy = [curriculum.noisy("579", t["task_id"], 0.5) for t in tasks]
    assert {int(a) - 579 for a in noisy} <= {-10, -1, 0, 1, 10} and 0 < noisy.count("579") < len(tasks)
    assert all(curriculum.noisy("579", t["task_id"], 0.0) == "579" for t in tasks)

    # pass@8 tags on every task; the curriculum gives the hard stage twice the generations per prompt
    assert sum(result["tags"].values()) == len(tasks)
    rollouts = {r["stage"]: r["rollouts_per_prompt"] for r in store.rows("curriculum")}
    assert rollouts == {"broad": 4, "hard": 8}

    # three arms at equal total completions; (b) is two stages, broad then hard
    arms = result["arms"]
    assert arms["b"]["stages"] == ["grpo-b-broad-s0", "grpo-b-hard-s0"]
    assert len({arms[a]["completions"] for a in curriculum.ARMS}) == 1 and arms["a"]["completions"] == 32
    assert all(len(arms[a]["reward"]) == 2 for a in curriculum.ARMS)

    # held-out pass@1 and pass@8 of the warm start and every arm, in one eval stage on fresh samples
    models = {r["model"] for r in result["eval"] if r["difficulty"] == "all"}
    assert models == {"warm start", "a", "b", "c"}
    held_out = sum(1 for s in split.values() if s == "held_out")
    assert all(r["tasks"] == held_out for r in result["eval"] if r["difficulty"] == "all")
    assert store.manifest("eval-s0")["config"]["seed"] != store.manifest("passk")["config"]["seed"]

    text = capsys.readouterr().out
    assert "(b) broad, then hard pass@1" in text and "zero-var groups" in text
    assert (out / "curriculum.png").read_bytes()[:4] == b"\x89PNG"

    # the merge of two seeds' results shows the spread
    second = tmp_path / "seed1"
    second.mkdir()
    result["seed"] = 1
    result["eval"] = [{**r, "pass@1": (r["pass@1"] or 0) + 0.25} for r in result["eval"]]
    (second / "results.json").write_text(json.dumps([result]))
    monkeypatch.setattr(sys, "argv", ["curriculum.py", "--report", str(out), str(second), "--out", str(tmp_path)])
    curriculum.main()
    merged = capsys.readouterr().out
    assert "seeds 0,1" in merged and "(0.250)" in merged
