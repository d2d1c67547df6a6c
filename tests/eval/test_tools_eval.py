"""`eval.tools` end to end: held-out trajectories replayed against real OpenAI-API output, and BFCL categories."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tests.eval.helpers import tools_run
from trajkit.eval import bfcl, cli
from trajkit.eval.tools import EVAL_TOOLS, EvalToolsConfig
from trajkit.models.base import ModelSpec
from trajkit.models.scripted_server import Fault, ScriptedServer
from trajkit.runner import run_stage
from trajkit.store import Store

PARIS = {"name": "get_forecast", "arguments": {"city": "paris", "days": 3}}
ADD = {"name": "add", "arguments": {"a": 2, "b": 3.0}}


def replay_script(messages, tools, body):
    """'good' answers like the reference (calls reordered, re-cased); 'bad' makes one mistake of each kind."""
    good = body["model"] == "good"
    first, last = messages[1]["content"] if messages[0]["role"] == "system" else messages[0]["content"], messages[-1]
    assert {t["function"]["name"] for t in tools} == {"get_forecast", "add"}
    if last["role"] == "user" and "Paris" in first:
        return {"tool_calls": [ADD, PARIS] if good else [PARIS]}  # bad: one of two parallel calls
    if last["role"] == "user":
        return {
            "tool_calls": [
                {"name": "get_forecast", "arguments": {"city": "Rome"} if good else {"city": "Rome", "days": "2"}}
            ]
        }
    if "Paris" in first and not good:
        return {"tool_calls": [ADD]}  # bad: calls again where the reference answered
    return "Done."


def spec(name: str, url: str, retries: int = 5) -> ModelSpec:
    return ModelSpec(model=name, backend="openai", base_url=url, max_retries=retries)


def test_replays_held_out_turns_and_scores_them(run_dir):
    store = tools_run(run_dir)
    with (
        ScriptedServer(replay_script) as good_bad,
        ScriptedServer(lambda *a: "x", faults=lambda i: Fault.error(500)) as down,
    ):
        cfg = EvalToolsConfig(
            models=[
                spec("good", good_bad.base_url),
                spec("bad", good_bad.base_url),
                spec("down", down.base_url, retries=0),
            ]
        )
        # one of three models is down on purpose: its rows say so, the stage may lose its calls
        manifest = run_stage(store, EVAL_TOOLS, cfg, name="eval-tools", quiet=True, max_failed_calls=1.0)
        requests = len(good_bad.chat_requests)
        rows = {(r["model"], r["traj_id"], r["turn"]): r for r in store.rows("eval_tools", stage="eval-tools")}

        # held-out, completed trajectories only (A and B), every assistant turn: 4 turns x 3 models
        assert sorted({(t, n) for _, t, n in rows}) == [("traj-A", 1), ("traj-A", 4), ("traj-B", 1), ("traj-B", 3)]
        assert len(rows) == 12 and requests == 8
        assert all(rows["good", t, n]["correct"] for _, t, n in rows if _ == "good")
        verdicts = {
            (t, n): (r["correct"], r["reason"].split(":")[0] if r["reason"] else None)
            for (m, t, n), r in rows.items()
            if m == "bad"
        }
        assert verdicts == {
            ("traj-A", 1): (False, "wrong_count"),
            ("traj-A", 4): (False, "should_abstain"),
            ("traj-B", 1): (False, "type_error"),
            ("traj-B", 3): (True, None),
        }
        assert rows["good", "traj-A", 1]["server"] == "weather" and rows["good", "traj-A", 4]["server"] is None
        assert json.loads(rows["good", "traj-A", 1]["expected"]) == [
            {"name": "get_forecast", "arguments": {"city": "Paris", "days": 3}},
            {"name": "add", "arguments": {"a": 2, "b": 3}},
        ]
        assert json.loads(rows["bad", "traj-B", 1]["predicted"]) == [
            {"name": "get_forecast", "arguments": {"city": "Rome", "days": "2"}}
        ]
        down_rows = [r for (m, _, _), r in rows.items() if m == "down"]
        assert all(r["correct"] is None and r["reason"].startswith("model_error") for r in down_rows)
        assert {r["reason_code"] for r in down_rows} == {"model_error"} and {
            r["reason_code"] for r in rows.values()
        } == {
            None,
            "model_error",
        }

        assert [m["model"] for m in manifest["summary"]["models"]] == ["good", "bad", "down"]
        report = {m["model"]: m for m in manifest["summary"]["models"]}
        assert report["good"]["overall"] == {
            "turns": 4,
            "judged": 4,
            "accuracy": 1.0,
            "name_accuracy": 1.0,
            "args_accuracy": 1.0,
            "abstention_accuracy": 1.0,
        }
        assert report["bad"]["overall"]["accuracy"] == 0.25 and report["bad"]["overall"]["abstention_accuracy"] == 0.5
        assert [(s["server"], s["turns"], s["accuracy"]) for s in report["bad"]["servers"]] == [
            ("(abstention)", 2, 0.5),
            ("weather", 2, 0.0),
        ]
        assert [(t["tool"], t["turns"], t["name_accuracy"]) for t in report["bad"]["tools"]] == [
            ("get_forecast", 2, 0.5),
            ("add", 1, 0.0),
        ]
        assert report["bad"]["reasons"] == [["should_abstain", 1], ["type_error", 1], ["wrong_count", 1]]
        assert report["down"]["overall"]["judged"] == 0 and report["down"]["reasons"] == [["model_error", 4]]

        # a killed run resumes: turns already scored are not asked again; failed requests are asked again
        assert len(down.chat_requests) == 4
        store.manifest_path("eval-tools").unlink()
        again = run_stage(store, EVAL_TOOLS, cfg, name="eval-tools", quiet=True, max_failed_calls=1.0)
        assert len(good_bad.chat_requests) == requests and store.count("eval_tools") == 12
        assert len(down.chat_requests) == 8 and again["counts"]["retried"] == 4


def bfcl_script(answers):
    """Answers BFCL entries from their ground truth: every third one with a wrong value; irrelevance: abstains."""

    def script(messages, tools, body):
        question = messages[-1]["content"]
        if question not in answers:
            return "I cannot help with that."
        index, expected = answers[question]
        calls = []
        for exp in expected:
            args = {k: next(a for a in v if a != "") for k, v in exp.accept.items() if any(a != "" for a in v)}
            calls.append({"name": exp.name, "arguments": args})
        if index % 3 == 2:
            k = next(iter(calls[0]["arguments"]))
            calls[0]["arguments"][k] = "definitely wrong"
        return {"tool_calls": calls}

    return script


def test_bfcl_categories_through_the_same_command(run_dir):
    limit = 9
    answers = {}
    for category in ("simple_python", "parallel"):
        for i, e in enumerate(bfcl.load(category, limit)):
            answers[e.messages[-1]["content"]] = (i, e.expected)
    from trajkit.store import Store

    store = Store(run_dir)
    with ScriptedServer(bfcl_script(answers)) as server:
        args = [
            "tools",
            "--run",
            str(run_dir),
            "--model",
            "m",
            "--backend",
            "openai",
            "--base-url",
            server.base_url,
            "--bfcl",
            "simple",
            "--bfcl",
            "parallel",
            "--bfcl",
            "irrelevance",
            "--limit",
            str(limit),
        ]
        result = CliRunner().invoke(cli.app, args, env={"COLUMNS": "200"})
        sent = server.chat_requests
    assert result.exit_code == 0, result.output
    assert f"BFCL {bfcl.version()}" in result.output and "bfcl/irrelevance" in result.output
    summary = store.manifest("eval-tools")["summary"]
    rows = store.rows("eval_tools", stage="eval-tools")
    assert len(rows) == 3 * limit and len(sent) == 3 * limit
    by_cat = {c: [r for r in rows if r["server"] == f"bfcl/{c}"] for c in ("simple_python", "parallel", "irrelevance")}
    for category in ("simple_python", "parallel"):
        assert sum(r["correct"] for r in by_cat[category]) == limit - limit // 3
    assert all(r["correct"] for r in by_cat["irrelevance"])
    assert summary["bfcl_version"] == bfcl.version()
    assert [(c["category"], c["entries"], c["disagree"]) for c in summary["bfcl_checker"]] == [
        ("simple_python", limit, 0),
        ("parallel", limit, 0),
    ]
    assert all(c["bfcl"] == c["trajkit"] == pytest.approx(2 / 3) for c in summary["bfcl_checker"])
    factorial = next(b for b in sent if "factorial" in json.dumps(b["tools"]))
    assert {t["function"]["name"] for t in factorial["tools"]} == {"math_factorial"}


def test_a_budget_cap_stops_the_stage_instead_of_becoming_error_rows(run_dir):
    from trajkit.errors import StageStopped

    store = tools_run(run_dir)
    with ScriptedServer(replay_script) as server:
        cfg = EvalToolsConfig(models=[spec("good", server.base_url)], concurrency=1, seed=9)
        with pytest.raises(StageStopped):
            run_stage(store, EVAL_TOOLS, cfg, name="eval-tools", quiet=True, budget_tokens=1)
        assert store.manifest("eval-tools") is None
        assert not [r for r in store.rows("eval_tools") if (r["reason"] or "").startswith("model_error")]
        run_stage(store, EVAL_TOOLS, cfg, name="eval-tools", quiet=True)
        assert {b["seed"] for b in server.chat_requests} == {9}
        args = ["tools", "--run", str(run_dir), "--model", "good", "--backend", "openai", "--base-url", server.base_url]
        result = CliRunner().invoke(cli.app, [*args, "--seed", "7", "--name", "by-cli"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        assert {b["seed"] for b in server.chat_requests[-4:]} == {7}
    assert store.count("eval_tools") == 8 and all(r["correct"] for r in store.rows("eval_tools"))
    assert store.manifest("by-cli")["config"]["seed"] == 7


def test_config_errors():
    from trajkit.config import build
    from trajkit.errors import UserError

    with pytest.raises(UserError, match="distinct names"):
        build(EvalToolsConfig, {"models": [{"model": "a"}, {"model": "a"}]})
    with pytest.raises(UserError, match="unknown status"):
        build(EvalToolsConfig, {"models": [{"model": "a"}], "statuses": ["done"]})
    with pytest.raises(UserError, match="unknown or unsupported BFCL category"):
        bfcl.resolve(["simple_java"])


def test_a_rerun_retries_by_reason_code_never_by_the_reasons_text(run_dir):
    """Only rows coded model_error are asked again: not one whose reason merely reads so (as a row of a run
    written before the column reads: its code is null)."""
    from trajkit.eval.tools import retry_model_errors
    from trajkit.runner import StageContext

    store = Store(run_dir)
    base = {"model": "m", "traj_id": "t", "correct": None}
    rows = [
        {**base, "eval_id": "coded", "turn": 1, "reason": "the endpoint said no", "reason_code": "model_error"},
        {**base, "eval_id": "text", "turn": 2, "reason": "model_error: quoted by a tool", "reason_code": None},
    ]
    store.write("eval_tools", "eval-tools", rows)
    assert retry_model_errors(StageContext(store, "eval-tools", "eval.tools"), None) == 1
    assert [r["eval_id"] for r in store.rows("eval_tools")] == ["text"]
