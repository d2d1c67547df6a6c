"""bench/tool_learning.py's CPU version: every stage of the tool-learning bench, a tiny model, a step or two."""

from __future__ import annotations

import json
import random
import sys

from bench import tool_learning as bench
from bench import tool_world as world
from trajkit.accepted import accepted_ids
from trajkit.store import Store


def test_world_questions_parse_back_and_the_teacher_solves_them():
    """Every template's questions parse back to it; the reference solution passes the task's own checks (its
    ``Answer:`` line by trajkit's answer matching, ``number`` or ``exact``, and the end state) when run on the real
    tool functions; each injected label departs from it as its docstring says."""
    from trajkit.verify.matching import answer_matches, state_matches

    outcomes: dict[str, list[bool]] = {}
    for t in world.TEMPLATES:
        for i in range(6):
            p = t.draw(random.Random(i))
            found = world.parse(t.text(p))
            assert found is not None and found[0] is t and t.text(found[1]) == t.text(p)
            task = t.candidate(found[1])
            for seed in range(8):
                plan = world.plan_for(t, found[1], task["question"], seed, reference=False)
                kv: dict[str, str] = {}
                seen: list[str] = []
                while (calls := world.next_turn(t, found[1], plan, seen)) is not None:
                    seen += [world.run_tool(tool, args, kv) for tool, args in calls]
                answer = world.final_answer(t, found[1], plan, seen)
                ok = task["answer"] is None or answer_matches(answer, task["answer"], task["answer_match"])[0]
                ok &= all(
                    state_matches(world.run_tool(s["tool"], s["arguments"], dict(kv)), s["expected"], "exact")[0]
                    for s in task["state"]
                )
                outcomes.setdefault(plan.label, []).append(ok)
                assert answer.splitlines()[-1].startswith("Answer: ")
                if plan.label == "missing_call":
                    assert not seen
    assert all(outcomes["correct"]) and all(outcomes["redundant_calls"])
    for label in ("wrong_tool", "wrong_arguments", "missing_call"):
        assert sum(outcomes[label]) < len(outcomes[label]) / 2, label  # mostly wrong (some slips change nothing)
    assert set(outcomes) == {name for name, _ in world.LABELS}
    assert {t.match for t in world.TEMPLATES} == {"number", "exact", None}  # both answer rules, and state only


def test_arm_rows_match_tokens_and_keep_the_label_mix():
    """(a)'s rows reach (b)'s token count by swapping rows for rows of the same injected label only."""
    rng = random.Random(0)
    ids = [f"r{i}" for i in range(300)]
    labels = {i: rng.choice(("correct", "correct", "wrong_tool", "missing_call")) for i in ids}
    size = {i: rng.randint(600, 1400) + (300 if labels[i] == "wrong_tool" else 0) for i in ids}
    plain = bench.draw_rows(ids, size, labels, 480, seed=3, target=None)
    assert len(plain) == 480 and all(plain.count(i) in (1, 2) for i in ids)  # one pass, then a sample
    target = sum(size[i] for i in plain) - 20_000
    matched = bench.draw_rows(ids, size, labels, 480, seed=3, target=target)
    assert abs(sum(size[i] for i in matched) - target) <= target / 1000
    mix = [sorted(labels[i] for i in rows) for rows in (plain, matched)]
    assert mix[0] == mix[1]


def test_tool_learning_bench_runs_every_stage_and_its_arms_differ(tmp_path, monkeypatch, capsys, tiny_model_dir):
    out, run = tmp_path / "out", tmp_path / "run"
    argv = ["tool_learning.py", "--tiny", "--seeds", "0", "--out", str(out), "--run", str(run)]
    monkeypatch.setattr(sys, "argv", [*argv, "--student", str(tiny_model_dir)])
    bench.main()
    res = json.loads((out / "results.json").read_text())
    data, main = res["data"], Store(run / "data")

    # every phase ran through trajkit's stages, each in its store: the data, the arms' rows and SFT, GRPO, eval
    data_stages = ("harvest", "tasks", "dedup", "split", "contaminated", "rollouts", "judge", "filter", "reference")
    assert all(main.manifest(name) is not None for name in data_stages)
    assert all(Store(run / "arms" / f"{arm}-s0").manifest(n) for arm in "ab" for n in ("rows", "sft"))
    assert all(
        Store(run / "eval" / m).manifest(n) for m in ("d", "a-s0", "b-s0", "c-s0") for n in ("passk", "tools", "bfcl")
    )

    # the split is by template: no template (or its combination) on both sides, every held-out task checked
    assert data["templates_on_both_sides"] == [] and data["tasks"]["held_out"] > 0
    assert data["check"]["held_out"] == data["tasks"]["held_out"] and data["check"]["ngram"] == 8
    held = {r["task_id"] for r in main.rows("splits") if r["split"] == "held_out"}
    rollouts = main.rows("trajectories", stage="rollouts")
    assert rollouts and not any(r["task_id"] in held for r in rollouts)
    assert {r["task_id"] for r in main.rows("trajectories", stage="reference")} <= held

    # every rollout has its injected label in the side file; the confusion matrix covers them all
    labels = json.loads((run / "labels.json").read_text())
    assert set(labels) == {r["traj_id"] for r in rollouts}
    assert sum(sum(v.values()) for v in data["confusion"].values()) == len(rollouts)
    confusion = data["confusion"]
    assert confusion["correct"]["rejected"] == 0  # the teacher's correct rollouts all pass verifier, rules and judge
    for label in ("wrong_type", "missing_call"):  # a schema break stops the agent loop; no call fails the rules
        assert confusion.get(label, {}).get("accepted", 0) == 0

    # (a) and (b) train on the same number of rows and tokens, drawn from different pools
    a, b = res["arms"]["a-s0"], res["arms"]["b-s0"]
    assert a["rows"] == b["rows"] == res["settings"]["sft_steps"] * res["settings"]["sft_batch"]
    assert abs(a["tokens"] - b["tokens"]) <= max(b["tokens"] / 1000, max(a["tokens"], b["tokens"]) / a["rows"])
    accepted = accepted_ids(main, "trajectories")
    assert b["pool"] == len([r for r in rollouts if r["traj_id"] in accepted])
    assert a["pool"] == len([r for r in rollouts if r["status"] == "completed"]) > b["pool"]
    sources = {arm: [r["messages"] for r in Store(run / "arms" / f"{arm}-s0").rows("trajectories")] for arm in "ab"}
    rejected = [r["messages"] for r in rollouts if r["status"] == "completed" and r["traj_id"] not in accepted]
    assert not any(m in rejected for m in sources["b"])  # (b) never sees a rollout trajkit rejects

    assert all(res["train"][f"{arm}-s0"]["steps"] == res["settings"]["sft_steps"] for arm in "ab")

    # (c) trains with the tools in the loop, from (b)'s model; every arm and the raw student are evaluated
    assert res["train"]["c-s0"]["steps"] == res["settings"]["grpo_steps"]
    grpo = Store(run / "grpo" / "c-s0").manifest("grpo-c-s0")
    assert grpo["config"]["model"] == res["train"]["b-s0"]["model"] and grpo["config"]["tools"]
    assert set(res["eval"]) == {"d", "a-s0", "b-s0", "c-s0"}
    for r in res["eval"].values():
        assert 0 <= r["pass1"] <= 1 and r["bfcl_entries"] == 4 * res["settings"]["bfcl_limit"] and r["tool_turns"]
    text = capsys.readouterr().out
    assert "goal (b) > (a), the curation pays" in text and "accepted by trajkit x injected label" in text
    assert all(name in text for name in bench.ARM_NAMES.values()) and "not run" not in text
    assert (out / "tool_learning.png").read_bytes()[:4] == b"\x89PNG"

    # --report merges results files (one per GPU call): a second call's jobs join the first's
    second = tmp_path / "second"
    second.mkdir()
    (second / "results.json").write_text(json.dumps({"eval": {"c-s1": res["eval"]["c-s0"]}}))
    monkeypatch.setattr(sys, "argv", ["tool_learning.py", "--report", str(out), str(second), "--out", str(tmp_path)])
    bench.main()
    assert "(c) (b), then GRPO with tools" in capsys.readouterr().out
