"""synth.tasks: Toucan's modes with direct, VS-Standard, VS-CoT and VS-Multi requests, resumable, fault-tolerant."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import pytest

from tests.fixtures.synth import model, stage, with_servers
from tests.synth.brain import Brain
from tests.test_store import ids_map_to_one_row
from trajkit.config import build
from trajkit.envs.config import ServerConfig
from trajkit.envs.discovery import discover
from trajkit.errors import StageStopped, UserError
from trajkit.models.scripted_server import Fault, ScriptedServer
from trajkit.prompts import DEFAULT_DIR
from trajkit.runner import run_stage
from trajkit.stages import get_stage
from trajkit.store import Store
from trajkit.synth.tasks import TasksConfig


def _config(server, **extra):
    return {
        "model": model(server),
        "modes": ["single_tool"],
        "sampling": "list",
        "servers": ["calculator"],
        "requests_per_mode": 2,
        **extra,
    }


def _by_request(run):
    out = {}
    for t in Store(run).rows("tasks"):
        out.setdefault(t["source_id"], []).append(t)
    return out


def test_direct_asks_for_k_completions_of_one_task(synth_run):
    with ScriptedServer(Brain(garbage=0)) as server:
        stage(synth_run, "synth.tasks", _config(server, method="direct", k=3))
        bodies = server.chat_requests
    assert len(bodies) == 2 and all(b["n"] == 3 for b in bodies)
    assert "Return ONLY the task as one JSON object" in bodies[0]["messages"][0]["content"]
    requests = _by_request(synth_run)
    assert sorted(len(v) for v in requests.values()) == [3, 3]
    for rows in requests.values():
        assert sorted(json.loads(r["metadata"])["candidate_index"] for r in rows) == [0, 1, 2]
        assert all(r["vs_method"] == "direct" and r["vs_probability"] is None and r["question"] for r in rows)
        assert len({r["question"] for r in rows}) == 3  # three samples, not one answer thrice


def test_vs_cot_and_tail_threshold(synth_run):
    with ScriptedServer(Brain(garbage=0)) as server:
        stage(synth_run, "synth.tasks", _config(server, method="vs_cot", k=4, tail=0.1))
        bodies = server.chat_requests
    prompt = bodies[0]["messages"][0]["content"]
    assert "<reasoning>" in prompt and "Generate 4 different tasks" in prompt and "less than 0.1" in prompt
    rows = Store(synth_run).rows("tasks")
    assert len(rows) == 8 and all(r["vs_method"] == "vs_cot" for r in rows)
    for r in rows:
        above = json.loads(r["metadata"]).get("above_tail", False)
        assert above == (r["vs_probability"] >= 0.1)


def test_vs_multi_asks_in_turns_until_k(synth_run):
    with ScriptedServer(Brain(garbage=0)) as server:
        stage(synth_run, "synth.tasks", _config(server, method="vs_multi", k=5, m=2))
        bodies = server.chat_requests
    assert len(bodies) == 2 * 3  # turns of 2, 2 and 1
    turns = Counter(len(b["messages"]) for b in bodies)
    assert turns == {1: 2, 3: 2, 5: 2}
    last = next(b for b in bodies if len(b["messages"]) == 5)["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "user", "assistant", "user"]
    assert "Generate 1 alternative tasks" in last[-1]["content"]
    for rows in _by_request(synth_run).values():
        assert len(rows) == 5
        assert sorted(json.loads(r["metadata"])["turn"] for r in rows) == [0, 0, 1, 1, 2]


def test_multi_server_tasks_span_servers(tmp_path, calculator_rows, raw_server, model_server):
    from trajkit.envs.discovery import discover

    run = with_servers(tmp_path / "run", calculator_rows + asyncio.run(discover({"raw": raw_server()})))
    stage(run, "synth.tasks", _config(model_server, modes=["multi_server"], servers=None, sampling="uniform", k=2))
    rows = Store(run).rows("tasks")
    assert rows and all(len(r["server_ids"]) == 2 and r["mode"] == "multi_server" for r in rows)
    prompt_tools = {t for r in rows for t in json.loads(r["metadata"])["drawn_tools"]}
    assert {t.split(".")[0] for t in prompt_tools} == {"calculator", "raw"}


def test_a_rerun_asks_nothing_twice(synth_run):
    with ScriptedServer(Brain(garbage=0.3)) as server:
        cfg = _config(server, method="vs_standard", k=3, requests_per_mode=4)
        first = stage(synth_run, "synth.tasks", cfg)
        store = Store(synth_run)
        rows = sorted(store.rows("tasks"), key=lambda r: r["task_id"])
        (store.stage_dir("tasks") / "_manifest.json").unlink()  # as if killed after the last write
        again = stage(synth_run, "synth.tasks", cfg)
        assert len(server.chat_requests) == 4
    assert again["counts"]["resumed"] == 4
    assert sorted(store.rows("tasks"), key=lambda r: r["task_id"]) == rows
    assert again["counts"]["rows.tasks"] == first["counts"]["rows.tasks"]


def test_prompt_files_can_be_overridden(synth_run, tmp_path, model_server):
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    text = (DEFAULT_DIR / "task_single_tool.md").read_text()
    (prompts / "task_single_tool.md").write_text("You write tasks for accountants.\n" + text)
    with ScriptedServer(Brain(garbage=0)) as server:
        stage(synth_run, "synth.tasks", _config(server, prompts_dir=str(prompts), k=1))
        assert server.chat_requests[0]["messages"][0]["content"].startswith("You write tasks for accountants.")
    (prompts / "task_single_tool.md").write_text("no placeholders here")
    with pytest.raises(UserError, match="FORMAT"):
        stage(tmp_path / "other", "synth.tasks", _config(model_server, prompts_dir=str(prompts)))


def test_a_failing_model_becomes_rejects_not_a_crash_and_is_retried_on_resume(synth_run):
    """A failed call is a reject, never a task row (a null question written as a task: issue 34 item 3)."""
    store = Store(synth_run)
    with ScriptedServer(Brain(garbage=0), faults={0: Fault.error(500), 1: Fault.error(500)}) as server:
        cfg = _config(server, k=2, requests_per_mode=3, concurrency=1)
        manifest = stage(synth_run, "synth.tasks", cfg)
        assert manifest["counts"]["rejected.generation_error"] == 1  # one request failed its retry too
        tasks = store.rows("tasks")
        assert len(tasks) == 2 * 2 and all(t["question"] and t["raw_output"] for t in tasks)
        [failed] = store.rows("rejected")
        assert failed["reason"] == "generation_error" and failed["detail"].startswith("HTTP 500")
        assert failed["row_id"] not in {t["task_id"] for t in tasks}

        store.manifest_path("tasks").unlink()  # as a kill before the manifest leaves it: the stage resumes
        again = stage(synth_run, "synth.tasks", cfg)
        assert len(server.chat_requests) == 2 + 2 + 1  # the failed request alone was asked again
    assert again["counts"]["retried"] == 1 and "rejected.generation_error" not in again["counts"]
    tasks = store.rows("tasks")
    assert len(tasks) == 3 * 2 and all(t["question"] for t in tasks)
    assert len({t["task_id"] for t in tasks}) == 6 and not store.rows("rejected")


def test_a_request_whose_later_turn_failed_is_asked_again_whole(synth_run):
    """VS-Multi: turn 0's tasks are written, turn 1's call fails: the resume drops the request's rows and asks again."""
    store = Store(synth_run)
    with ScriptedServer(Brain(garbage=0), faults={1: Fault.error(500), 2: Fault.error(500)}) as server:
        cfg = _config(server, method="vs_multi", k=4, m=2, requests_per_mode=1)
        stage(synth_run, "synth.tasks", cfg, max_failed_calls=1.0)
        assert len(store.rows("tasks")) == 2 and [r["reason"] for r in store.rows("rejected")] == ["generation_error"]
        store.manifest_path("tasks").unlink()
        again = stage(synth_run, "synth.tasks", cfg)
    assert again["counts"]["retried"] == 1 and len(store.rows("tasks")) == 4 and not store.rows("rejected")


def test_no_servers_is_a_user_error(tmp_path, model_server):
    with pytest.raises(UserError, match="synth harvest"):
        stage(tmp_path / "empty", "synth.tasks", _config(model_server))


def test_a_budget_cap_stops_cleanly_and_the_rerun_finishes(synth_run, tmp_path, calculator_rows):
    with ScriptedServer(Brain(garbage=0.3)) as server:
        cfg = _config(server, k=3, requests_per_mode=6, concurrency=1)
        with pytest.raises(StageStopped):
            stage(synth_run, "synth.tasks", cfg, budget_tokens=1500)
        store = Store(synth_run)
        assert store.manifest("tasks") is None and 0 < len(_by_request(synth_run)) < 6
        stage(synth_run, "synth.tasks", cfg)
        clean = with_servers(tmp_path / "clean", calculator_rows)
        stage(clean, "synth.tasks", cfg)
    assert sorted(store.rows("tasks"), key=lambda r: r["task_id"]) == sorted(
        Store(clean).rows("tasks"), key=lambda r: r["task_id"]
    )


def test_prompt_shows_each_tools_parameters(tmp_path):
    """The rendered prompt lists each tool's title and description, its parameters' types, required flags,
    enums and defaults, from a real server's harvest."""
    gallery = Path(__file__).parent.parent / "envs" / "servers" / "gallery.py"
    rows = asyncio.run(discover({"gallery": ServerConfig(command="python", args=[str(gallery)])}))
    run = with_servers(tmp_path / "run", rows)
    with ScriptedServer(Brain(garbage=0)) as server:
        stage(run, "synth.tasks", _config(server, servers=["gallery"], method="direct", k=1, requests_per_mode=1))
        prompt = server.chat_requests[0]["messages"][0]["content"]
    listing = (
        "### gallery\nShapes, pictures and notes.\n"
        "- `area` (Shape area): Area of a square (side) or circle (radius).\n"
        '  - `shape`: string, required, one of "square", "circle"\n'
        "  - `size`: number, required\n"
        '  - `unit`: string, optional, default "cm"\n'
        "- `picture` (A picture): A tiny PNG image.\n"
        "- `sound`: A short WAV clip.\n"
    )
    assert listing in prompt


def test_a_dead_endpoint_fails_the_stage_and_fresh_reuses_no_answer(synth_run, capsys):
    """A wrong port ended "done", exit 0; with the call cache on, a dead endpoint "succeeded" from old answers,
    without a word; ``--fresh`` replayed the cache silently (issue 34 items 3 and 4)."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    with ScriptedServer(Brain(garbage=0)) as server:
        cfg = _config(server, k=1)
        first = stage(synth_run, "synth.tasks", cfg)
        assert first["usage"]["calls"] == 2 and first["usage"]["cached_calls"] == 0
        assert first["usage"]["failed_calls"] == 0
        cached = stage(synth_run, "synth.tasks", cfg, name="cached")  # the cache at work: nothing to warn of
        assert cached["usage"]["cached_calls"] == 2 and "warnings" not in cached
    gone = _config(server, k=1) | {"model": model(server) | {"base_url": dead, "max_retries": 0}}
    # not fresh: the cache answers every call, and the stage says the endpoint behind them is gone
    offline = run_stage(Store(synth_run), get_stage("synth.tasks"), build(TasksConfig, gone), name="offline")
    assert offline["usage"]["cached_calls"] == 2 and offline["usage"]["calls"] == 0
    [warning] = offline["warnings"]
    assert warning.startswith(f"every answered model call (2) came from the call cache, and scripted at {dead} is ")
    assert "unreachable (" in warning and "--fresh asks the model again" in warning
    assert f"offline: warning: {warning}" in " ".join(capsys.readouterr().err.split())
    again = stage(synth_run, "synth.tasks", gone, fresh=True, reuse_cache=True)  # the user asked: old answers
    assert again["usage"]["cached_calls"] == 2 and again["usage"]["calls"] == 0
    with pytest.raises(UserError) as e:
        stage(synth_run, "synth.tasks", gone, fresh=True)
    assert str(e.value).startswith(f"stage 'tasks': 2 of 2 model calls failed (scripted at {dead}: ")
    assert "\n" not in str(e.value) and Store(synth_run).manifest("tasks") is None
    with pytest.raises(UserError, match="2 of 2 model calls failed"):  # resumed, still fresh: no old answer
        stage(synth_run, "synth.tasks", gone)
    assert stage(synth_run, "synth.tasks", gone, max_failed_calls=1.0)["usage"]["failed_calls"] == 2


def test_task_ids_are_unique_across_stages_and_generators(synth_run):
    """A second tasks stage (another name, another generator model) reused the ids of the first for other
    questions (issue 34 item 1): a task's id is its content, written once; the second provenance is a reject."""
    with ScriptedServer(Brain(garbage=0)) as a, ScriptedServer(Brain(garbage=0), model="other") as b:
        stage(synth_run, "synth.tasks", _config(a, k=2), name="tasks-a")
        second = _config(b, k=2) | {"model": model(b) | {"model": "other"}}
        manifest = stage(synth_run, "synth.tasks", second, name="tasks-b")
    store = Store(synth_run)
    dupes = [r for r in store.rows("rejected") if r["reason"] == "duplicate_task"]
    assert len(dupes) == manifest["counts"]["rejected.duplicate_task"] == 4  # the same 4 questions, seeded alike
    written = {t["task_id"]: t for t in store.rows("tasks")}
    assert len(written) == 4 and all(t["generator_model"] == "scripted" for t in written.values())
    assert {d["detail"].split()[0] for d in dupes} == set(written)  # each names the task it repeats
    assert all("other, request " in d["detail"] and d["row_id"] not in written for d in dupes)
    ids_map_to_one_row(store)


def test_tasks_that_do_not_fit_their_mode_are_rejected(synth_run):
    """multi_tool tasks with one target tool were kept (issue 34): they are rejected as mode_mismatch, under
    their request's candidate id, so the same task from a single_tool request is still written as a task."""
    with ScriptedServer(Brain(garbage=0)) as server:
        stage(synth_run, "synth.tasks", _config(server, modes=["multi_tool"], requests_per_mode=8, k=1))
    rows = Store(synth_run).rows("tasks")
    reasons = {r["row_id"]: r["reason"] for r in Store(synth_run).rows("rejected")}
    valid = [t for t in rows if t["task_id"] not in reasons]
    assert valid and all(len(t["target_tools"]) >= 2 for t in valid)
    mismatched = [t for t in rows if reasons.get(t["task_id"]) == "mode_mismatch"]  # the brain's sums for tools
    assert mismatched and all(t["target_tools"] == ["add"] for t in mismatched)  # it cannot phrase

    def one_sum(messages, tools, body):
        return json.dumps({"responses": [{"question": "What is 2 plus 3?", "target_tools": ["add"], "answer": "5"}]})

    run = with_servers(synth_run.parent / "same", Store(synth_run).rows("servers"))
    with ScriptedServer(one_sum) as server:
        cfg = _config(server, modes=["multi_tool", "single_tool"], requests_per_mode=2, k=1, concurrency=1)
        manifest = stage(run, "synth.tasks", cfg)
    assert manifest["counts"]["rejected.mode_mismatch"] == 2 and manifest["counts"]["rejected.duplicate_task"] == 1
    tasks = Store(run).rows("tasks")
    assert sorted(t["mode"] for t in tasks) == ["multi_tool", "multi_tool", "single_tool"]
    mismatched = {r["row_id"] for r in Store(run).rows("rejected") if r["reason"] == "mode_mismatch"}
    assert mismatched == {t["task_id"] for t in tasks if t["mode"] == "multi_tool"}
