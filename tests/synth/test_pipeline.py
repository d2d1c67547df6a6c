"""The synth stages end to end against a scripted model and the real example MCP servers."""

from __future__ import annotations

import json
import shutil
from collections import Counter

from tests.fixtures.synth import model, pipeline_configs, stage, with_servers
from tests.synth.brain import Brain
from tests.synth.compare import assert_same_output, stage_rows
from trajkit.models.scripted_server import Fault, ScriptedServer
from trajkit.store import Store
from trajkit.synth.extend import ENDED, follow_up
from trajkit.synth.tool_accuracy import tool_accuracy


def _manifest(run, name):
    return Store(run).manifest(name)


def test_tasks_keep_rejected_rows_and_count_reasons(clean_pipeline):
    store = Store(clean_pipeline)
    tasks = store.rows("tasks")
    rejected = [r for r in store.rows("rejected", stage="tasks")]
    reasons = Counter(r["reason"] for r in rejected)
    counts = _manifest(clean_pipeline, "tasks")["counts"]
    assert reasons and {f"rejected.{k}": v for k, v in reasons.items()} == {
        k: v for k, v in counts.items() if k.startswith("rejected.")
    }
    by_id = {t["task_id"]: t for t in tasks}
    assert {r["row_id"] for r in rejected} <= by_id.keys()  # rejected rows stay in their table
    for r in rejected:
        row = by_id[r["row_id"]]
        assert row["raw_output"]
        if r["reason"] in ("unparseable", "refusal"):
            assert row["question"] is None
    good = [t for t in tasks if t["task_id"] not in {r["row_id"] for r in rejected}]
    assert good and all(t["vs_method"] == "vs_standard" and 0 <= t["vs_probability"] <= 1 for t in good)
    assert all(t["verifier"]["kind"] in ("tool_outcome", "none") for t in good)
    single = [t for t in good if t["mode"] == "single_tool"]
    multi = [t for t in good if t["mode"] == "multi_tool"]
    assert multi and all(len(set(t["target_tools"])) >= 2 for t in multi)  # mode_mismatch otherwise
    assert single and all(json.loads(t["verifier"]["spec"])["answer_match"] == "number" for t in single)
    # three candidates per request at most, indexed 0..k-1
    per_request = Counter(t["source_id"] for t in tasks)
    assert len(per_request) == 8 and max(per_request.values()) <= 3


def test_rollouts_cover_every_accepted_task(clean_pipeline):
    store = Store(clean_pipeline)
    accepted = store.ids("tasks") - store.rejected("tasks")
    trajs = store.rows("trajectories", stage="rollouts")
    assert {t["task_id"] for t in trajs} == accepted and len(trajs) == len(accepted)
    for t in trajs:
        assert t["parent_id"] is None and t["status"] == "completed"
        assert t["reason"] == "custom rollout (completed)"  # the custom rollout function ran
        assert t["roles"][:2] == ["system", "user"] and t["tools"] and t["model"] == "scripted"
    with_calls = [t for t in trajs if t["num_tool_calls"]]
    assert with_calls and all(t["final_answer"].startswith("The result is") for t in with_calls)


def test_judge_scores_are_parsed_or_null_with_a_reason(clean_pipeline):
    store = Store(clean_pipeline)
    tq = store.rows("task_quality")
    assert {r["task_id"] for r in tq} == store.ids("tasks") - store.rejected("tasks")
    unparsed = [r for r in tq if r["judge_reason"]]
    parsed = [r for r in tq if not r["judge_reason"]]
    assert unparsed and parsed
    assert all(r["quality_score"] is None and r["stability"] is None and r["judge_raw"] for r in unparsed)
    assert {r["judge_reason_code"] for r in unparsed} == {"judge_unreadable"}
    assert {r["judge_reason_code"] for r in parsed} == {None}
    assert all(1 <= r["quality_score"] <= 5 for r in parsed)
    tasks = {t["task_id"]: t for t in store.rows("tasks")}
    trajs = {t["traj_id"]: t for t in store.rows("trajectories", stage="rollouts")}
    jq = store.rows("trajectory_quality")
    assert {r["traj_id"] for r in jq} == set(trajs)
    for r in jq:
        t = trajs[r["traj_id"]]
        assert (r["tool_accuracy"], r["order_correct"]) == tool_accuracy(
            tasks[t["task_id"]]["target_tools"], t["tools_called"]
        )
        assert (r["completeness"] is None) == (r["judge_reason"] is not None)
    # the views join the scores onto their rows
    got = store.sql("SELECT count(*) FROM tasks WHERE quality_score IS NOT NULL").column(0)[0].as_py()
    assert got == len(parsed)


def test_a_failed_judge_request_is_a_row_with_its_reason_and_is_asked_again_on_resume(clean_pipeline, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(clean_pipeline, run, ignore=shutil.ignore_patterns("_cache"))
    store = Store(run)
    for later in ("rollouts", "judge", "filter", "extend"):
        store.drop_stage(later)
    with ScriptedServer(Brain(garbage=0), faults={0: Fault.error(500), 1: Fault.error(500)}) as server:
        cfg = {"model": model(server), "targets": ["tasks"], "concurrency": 1, "seed": 3}
        first = stage(run, "synth.judge", cfg)
        failed = [r for r in store.rows("task_quality") if r["judge_reason_code"] == "model_error"]
        assert len(failed) == 1 and failed[0]["judge_raw"] is None and failed[0]["quality_score"] is None
        asked = len(server.chat_requests)
        assert {b["seed"] for b in server.chat_requests} == {3} and asked == first["usage"]["calls"] + 1
        store.manifest_path("judge").unlink()  # as a kill before the manifest leaves it: the stage resumes
        again = stage(run, "synth.judge", cfg)
        assert len(server.chat_requests) == asked + 1  # the failed judgment alone, asked again
    rows = {r["task_id"]: r for r in store.rows("task_quality")}
    assert len(rows) == first["counts"]["rows.task_quality"] == again["counts"]["rows.task_quality"]
    assert rows[failed[0]["task_id"]]["judge_reason"] is None and again["counts"]["retried"] == 1


def test_a_failed_user_simulator_request_is_coded_model_error_and_runs_again_on_resume(clean_pipeline, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(clean_pipeline, run, ignore=shutil.ignore_patterns("_cache"))
    store = Store(run)
    store.drop_stage("extend")
    with ScriptedServer(Brain(garbage=0), faults={0: Fault.error(500), 1: Fault.error(500)}) as server:
        cfg = {"model": model(server), "rounds": 1, "concurrency": 1, "pool_size": 1}
        first = stage(run, "synth.extend", cfg)
        failed = [r for r in store.rows("trajectories", stage="extend") if r["status"] == "failed"]
        assert [(r["reason"][:29], r["reason_code"]) for r in failed] == [
            ("user simulator request failed", "model_error")
        ]
        store.manifest_path("extend").unlink()  # as a kill before the manifest leaves it: the stage resumes
        again = stage(run, "synth.extend", cfg)
    assert (
        again["counts"]["retried"] == 1 and again["counts"]["rows.trajectories"] == first["counts"]["rows.trajectories"]
    )
    assert failed[0]["traj_id"] not in {r["traj_id"] for r in store.rows("trajectories") if r["status"] == "failed"}


def test_filter_counts_reasons_and_keeps_rows(clean_pipeline):
    store = Store(clean_pipeline)
    rejected = store.rows("rejected", stage="filter")
    reasons = Counter(r["reason"] for r in rejected)
    assert reasons["no_tool_call"] and reasons["odd_answer"]  # a rule and the custom filter
    unreadable = {r["task_id"] for r in store.rows("task_quality") if r["judge_reason_code"] == "judge_unreadable"}
    unreadable |= {
        r["traj_id"] for r in store.rows("trajectory_quality") if r["judge_reason_code"] == "judge_unreadable"
    }
    trajs = store.rows("trajectories", stage="rollouts")
    expected = {t["traj_id"] for t in trajs if {t["traj_id"], t["task_id"]} & unreadable}
    assert expected and {r["row_id"] for r in rejected if r["reason"] == "judge_unreadable"} == expected
    counts = _manifest(clean_pipeline, "filter")["counts"]
    assert {k: v for k, v in counts.items() if k.startswith("rejected.")} == {
        f"rejected.{k}": v for k, v in reasons.items()
    }
    n = store.sql("SELECT count(*) FROM trajectories WHERE reject_reason IS NOT NULL").column(0)[0].as_py()
    assert n == len({r["row_id"] for r in rejected}) and n < store.count("trajectories")


def test_extend_continues_each_kept_conversation_for_two_rounds(clean_pipeline):
    store = Store(clean_pipeline)
    parents = {t["traj_id"]: t for t in store.rows("trajectories", stage="rollouts")}
    kept = set(parents) - store.rejected("trajectories")
    children = store.rows("trajectories", stage="extend")
    first = [c for c in children if c["parent_id"] in parents]
    second = [c for c in children if c["parent_id"] not in parents]
    assert {c["parent_id"] for c in first} == kept and len(first) == len(kept)
    completed_first = {c["traj_id"] for c in first if c["status"] == "completed"}
    assert completed_first and {c["parent_id"] for c in second} == completed_first
    every = parents | {c["traj_id"]: c for c in children}
    for c in children:
        parent = every[c["parent_id"]]
        assert c["task_id"] == parent["task_id"] and c["traj_id"] != parent["traj_id"]
        if c["status"] != "completed":
            assert (c["status"], c["reason"]) == ("aborted", "user simulator ended the conversation")
            continue
        n = len(parent["messages"])
        assert c["messages"][:n] == parent["messages"]
        follow_up = c["messages"][n]
        assert follow_up["role"] == "user" and follow_up["content"].startswith("Thanks! Now what is")
        assert c["tools_called"] in ([], ["multiply"]) and c["end_state"] is None


def test_follow_up_parsing():
    n = "0123456789abcdef"
    assert follow_up(f'<follow_up nonce="{n}">Now divide it by 3.</follow_up>', n) == ("Now divide it by 3.", None)
    said = (
        f'<think>hmm <follow_up nonce="{n}">no</follow_up></think> <follow_up nonce="{n}">"And 7 times 8?"</follow_up>'
    )
    assert follow_up(said, n) == ("And 7 times 8?", None)
    assert follow_up(f'<follow_up nonce="{n}"><END_CONVERSATION></follow_up>', n) == (None, ENDED)
    assert follow_up(f'<follow_up nonce="{n}"> </follow_up>', n) == (None, "user simulator wrote an empty follow-up")
    for unread in ("<follow_up>Now divide it by 3.</follow_up>", "<END_CONVERSATION>", '"And 7 times 8?"'):
        assert follow_up(unread, n) == (None, "no follow-up carrying this call's nonce")
    assert follow_up("", n) == (None, "user simulator wrote nothing")


def test_two_shards_give_the_same_rows_as_one(tmp_path, calculator_rows, model_server, clean_pipeline):
    run = with_servers(tmp_path / "sharded", calculator_rows)
    for name, cfg in pipeline_configs(model_server).items():
        for rank in (0, 1):
            stage(run, f"synth.{name}", cfg, rank=rank, world_size=2)
        assert all(Store(run).manifest(name, r, 2) for r in (0, 1))  # a shard may hold no work (extend: 5 parents)
        assert_same_output(clean_pipeline, run, name)
    # each shard did part of the work
    halves = [Store(run).manifest("rollouts", r, 2)["counts"]["rows.trajectories"] for r in (0, 1)]
    assert all(halves) and sum(halves) == len(stage_rows(clean_pipeline, "trajectories", "rollouts"))
