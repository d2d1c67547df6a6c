"""`eval.passk` end to end: two models, tasks with and without tools, real verifiers, the report per bucket."""

from __future__ import annotations

import json
import re

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tests.eval.helpers import question_expression
from trajkit.cli import app
from trajkit.envs.agent import episode_seed
from trajkit.eval import cli
from trajkit.eval.passk import EVAL_PASSK, EvalPasskConfig
from trajkit.models.base import ModelSpec
from trajkit.models.scripted_server import ScriptedServer
from trajkit.runner import run_stage
from trajkit.schema import content_id
from trajkit.store import Store
from trajkit.verify import pass_at_k

N, KS = 4, [1, 2, 4]
NAMES = ("easy-sum", "hard-sum", "train-sum", "tool")
# the seeds of 'weak''s odd attempts: it answers those wrong, so 2 of its 4 attempts at each task pass
ODD = {episode_seed(0, content_id("task", name), i) for name in NAMES for i in range(1, N, 2)}


def _custom(answer: int) -> dict:
    return {"kind": "custom", "spec": json.dumps({"path": "tests.eval.helpers:exact_answer", "answer": answer})}


def script(messages, tools, body):
    """'strong' is always right; 'weak' only on its even attempts (so 2 of 4 pass)."""
    right = body["model"] == "strong" or body["seed"] not in ODD
    if tools:  # the tool task: compute with the calculator, then answer from the tool's result
        if messages[-1]["role"] == "user":
            return {"tool_calls": [{"name": "evaluate", "arguments": {"expression": question_expression(messages)}}]}
        result = float(messages[-1]["content"])
        return f"The answer is {int(result) if right else int(result) + 1}."
    expr = question_expression(messages)
    value = eval(expr)  # the test's own "a + b" questions
    return f"The answer is {value if right else value + 1}."


@pytest.fixture
def calculator_rows(example_servers):
    return [r for r in example_servers if r["name"] == "calculator"]


def build(run, calculator_rows) -> tuple[Store, dict[str, str]]:
    store = Store(run, create=True)
    store.write("servers", "harvest", calculator_rows)
    ids = {name: content_id("task", name) for name in NAMES}
    store.write(
        "tasks",
        "synth",
        [
            {"task_id": ids["easy-sum"], "question": "What is 2 + 3?", "mode": "imported", "verifier": _custom(5)},
            {"task_id": ids["hard-sum"], "question": "What is 40 + 2?", "mode": "imported", "verifier": _custom(42)},
            {"task_id": ids["train-sum"], "question": "What is 1 + 1?", "mode": "imported", "verifier": _custom(2)},
            {
                "task_id": ids["tool"],
                "question": "Use the calculator: what is 6 * 7?",
                "mode": "single_tool",
                "server_ids": [calculator_rows[0]["server_id"]],
                "verifier": {"kind": "tool_outcome", "spec": json.dumps({"answer": "42"})},
            },
        ],
    )
    store.write(
        "passk",
        "tagging",
        [
            {"task_id": ids["easy-sum"], "samples": 8, "correct": 7, "difficulty": "easy"},
            {"task_id": ids["hard-sum"], "samples": 8, "correct": 1, "difficulty": "hard"},
            {"task_id": ids["tool"], "samples": 8, "correct": 7, "difficulty": "easy"},
        ],
    )
    store.write(
        "splits",
        "split",
        [{"task_id": t, "split": "train" if n == "train-sum" else "held_out"} for n, t in ids.items()],
    )
    return store, ids


def test_two_models_side_by_side(run_dir, calculator_rows):
    store, ids = build(run_dir, calculator_rows)
    with ScriptedServer(script) as server:
        models = [ModelSpec(model=m, backend="openai", base_url=server.base_url) for m in ("weak", "strong")]
        cfg = EvalPasskConfig(models=models, n=N, ks=KS, temperature=1.0)
        summary = run_stage(store, EVAL_PASSK, cfg, name="eval-passk", quiet=True)["summary"]
        requests = len(server.chat_requests)

        rows = {(r["model"], r["task_id"]): r for r in store.rows("eval_passk")}
        assert len(rows) == 6 and ids["train-sum"] not in {t for _, t in rows}  # held-out tasks only
        for (model, task), row in rows.items():
            correct = N if model == "strong" else N // 2
            assert (row["samples"], row["correct"]) == (N, correct), (model, task)
            assert row["pass_at"] == [{"k": k, "value": pytest.approx(pass_at_k(N, correct, k))} for k in KS]
        assert (
            rows["weak", ids["hard-sum"]]["difficulty"] == "hard" and rows["weak", ids["tool"]]["difficulty"] == "easy"
        )
        tool_requests = [b for b in server.chat_requests if b.get("tools")]
        assert len(tool_requests) == 2 * N * 2  # the tool task ran the agent loop: call, then answer
        held_out = ("easy-sum", "hard-sum", "tool")
        expected = {episode_seed(0, ids[t], i) for t in held_out for i in range(N)}
        assert {b["seed"] for b in server.chat_requests} == expected  # each attempt its own seed, the same per model

        report = {(e["model"], e["difficulty"]): e for e in summary["report"]}
        assert report["weak", "easy"]["tasks"] == 2 and report["weak", "hard"]["tasks"] == 1
        assert report["weak", "all"]["pass@1"] == pytest.approx(0.5) and report["weak", "all"][
            "pass@2"
        ] == pytest.approx(5 / 6)
        assert report["strong", "all"] == {
            "model": "strong",
            "difficulty": "all",
            "tasks": 3,
            **{f"pass@{k}": 1.0 for k in KS},
            **{f"tasks@{k}": 3 for k in KS},
        }
        on_disk = pq.read_table(run_dir / "reports" / "eval_passk.parquet").to_pylist()  # the stage name, file-safe
        assert on_disk == summary["report"]

        # killed after the rows: the rerun asks nothing again and writes nothing twice
        store.manifest_path("eval-passk").unlink()
        run_stage(store, EVAL_PASSK, cfg, name="eval-passk", quiet=True)
        assert len(server.chat_requests) == requests and store.count("eval_passk") == 6

        # the CLI shows the same report from the manifest, models side by side
        args = [
            "passk",
            "--run",
            str(run_dir),
            "--model",
            "weak",
            "--model",
            "strong",
            "--backend",
            "openai",
            "--base-url",
            server.base_url,
            "--n",
            str(N),
            "--temperature",
            "1.0",
            *[a for k in KS for a in ("--at", str(k))],
        ]
        result = CliRunner().invoke(cli.app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert re.search(r"weak\s.*strong", result.output.replace("\n", " "))
    all_line = next(line for line in result.output.splitlines() if line.strip("│┃ ").startswith("all"))
    assert "0.500" in all_line and "0.833" in all_line and "1.000" in all_line


def test_config_is_checked_before_work(run_dir):
    from trajkit.config import build as build_cfg
    from trajkit.errors import UserError

    with pytest.raises(UserError, match="every k must be <= n"):
        build_cfg(EvalPasskConfig, {"models": [{"model": "m"}], "n": 4, "ks": [1, 8]})
    with pytest.raises(UserError, match="split must be one of"):
        build_cfg(EvalPasskConfig, {"models": [{"model": "m"}], "split": "test"})
    Store(run_dir).write("tasks", "t", [{"task_id": "a", "mode": "imported"}])
    cfg = EvalPasskConfig(models=[ModelSpec(model="m", backend="openai", base_url="http://127.0.0.1:9/v1")])
    with pytest.raises(UserError, match="no tasks in split 'held_out'.*; run `trajkit curate split` first"):
        run_stage(Store(run_dir), EVAL_PASSK, cfg, quiet=True)
    Store(run_dir).write("splits", "split", [{"task_id": "a", "split": "train"}])  # split, none held out
    with pytest.raises(
        UserError, match=r"'held_out'.*; curate split put none there \(rerun `trajkit curate split --fresh`"
    ):
        run_stage(Store(run_dir), EVAL_PASSK, cfg, quiet=True)


def test_unevaluable_tasks_are_skipped_and_unjudged_attempts_redone_on_resume(run_dir, calculator_rows):
    from trajkit.models.scripted_server import Fault

    store, ids = build(run_dir, calculator_rows)
    extra = {
        "rejected": {"question": "What is 1 + 2?", "verifier": _custom(3)},
        "no-question": {"question": None, "verifier": _custom(3)},
        "no-verifier": {"question": "What is 1 + 3?", "verifier": {"kind": "none", "spec": "{}"}},
    }
    store.write(
        "tasks", "more", [{"task_id": content_id("task", n), "mode": "imported", **t} for n, t in extra.items()]
    )
    store.write("splits", "split2", [{"task_id": content_id("task", n), "split": "held_out"} for n in extra])
    reject = {"reject_id": "r1", "row_id": content_id("task", "rejected"), "table_name": "tasks", "stage": "dedup"}
    store.write("rejected", "dedup", [{**reject, "reason": "near_duplicate"}])

    with ScriptedServer(script, faults={0: Fault.error(400)}) as server:  # one attempt's request fails
        model = ModelSpec(model="strong", backend="openai", base_url=server.base_url, max_retries=0)
        cfg = EvalPasskConfig(models=[model], n=N, ks=KS, concurrency=1, limit=2, seed=5)
        first = run_stage(store, EVAL_PASSK, cfg, name="eval-passk", quiet=True)
        assert {k: v for k, v in first["counts"].items() if k.startswith("skipped.")} == {
            "skipped.rejected": 1,
            "skipped.no_question": 1,
            "skipped.no_verifier": 1,
        }
        assert first["counts"]["unjudged.model_error"] == 1
        rows = {r["task_id"]: r for r in store.rows("eval_passk")}
        assert sorted(r["samples"] for r in rows.values()) == [N - 1, N]  # the first two evaluable tasks
        # every attempt is kept, the unjudged one with its reason: what a user reads to see why
        attempts = [a for r in rows.values() for a in r["attempts"]]
        assert len(attempts) == 2 * N and {a["verdict"] for a in attempts} == {"pass", "error"}
        [failed] = [a for a in attempts if a["verdict"] == "error"]
        assert failed["reason_code"] == "model_error" and "400" in failed["reason"] and failed["completion"] is None
        assert all(re.fullmatch(r"The answer is \d+\.", a["completion"]) for a in attempts if a is not failed)
        out = CliRunner().invoke(
            app,
            [
                "sql",
                "-r",
                str(run_dir),
                "-f",
                "csv",
                "SELECT a.verdict, a.reason_code FROM eval_passk, unnest(attempts) AS t(a) WHERE a.verdict = 'error'",
            ],
        )
        assert out.output.splitlines()[-1] == "error,model_error", out.output
        asked = len(server.chat_requests)

        store.manifest_path("eval-passk").unlink()  # as a kill before the manifest leaves it: the stage resumes
        again = run_stage(store, EVAL_PASSK, cfg, name="eval-passk", quiet=True)
        # the unit with an unjudged attempt ran again, alone: its other attempts came from the call cache
        assert len(server.chat_requests) == asked + 1
    assert again["counts"]["retried"] == 1 and "unjudged.model_error" not in again["counts"]
    assert sorted(r["samples"] for r in store.rows("eval_passk")) == [N, N]
    assert {r["task_id"] for r in store.rows("eval_passk")} == set(rows) <= {ids["easy-sum"], ids["hard-sum"]}


class _TwoModels(ScriptedServer):
    def served_models(self) -> list[str]:
        return ["before", "after"]  # two models, listed apart (as vLLM lists two served models)


def test_two_names_one_endpoint_serves_as_one_model_are_a_warning(run_dir, capsys):
    store = Store(run_dir, create=True)
    task = {"task_id": "t", "question": "What is 2 + 3?", "mode": "imported", "verifier": _custom(5)}
    store.write("tasks", "synth", [task])
    store.write("splits", "split", [{"task_id": "t", "split": "held_out"}])
    for server_type, warned in ((ScriptedServer, True), (_TwoModels, False)):
        with server_type(lambda messages, tools, body: "The answer is 5.") as server:
            args = ["passk", "-r", str(run_dir), "--model", "before", "--model", "after", "--backend", "openai"]
            args += ["--base-url", server.base_url, "--n", "1", "--at", "1", "--name", server_type.__name__, "--fresh"]
            result = CliRunner().invoke(cli.app, args, env={"COLUMNS": "80"})  # a warning line is not wrapped
        assert result.exit_code == 0, result.output
        summary = store.manifest(server_type.__name__)["summary"]
        url = server.base_url.rstrip("/")
        line = f"'before' and 'after' are one model at {url} (it serves both as 'scripted'): "
        assert summary.get("same_model") == ([line + "this compares that model with itself"] if warned else None)
        assert (f"warning: {line}" in capsys.readouterr().err + result.output) == warned


def test_a_run_written_before_attempts_were_kept_opens(run_dir):
    """eval_passk and eval_tools shards of version 1 (no attempts, no reason_code) read as nulls, in SQL too."""
    import pyarrow.parquet as pq

    from tests.toy_stage import relist
    from trajkit import schema as S

    store = Store(run_dir, create=True)
    store.write(
        "eval_passk", "eval-passk", [{"eval_id": "e", "model": "m", "task_id": "t", "samples": 1, "correct": 1}]
    )
    store.write("eval_tools", "eval-tools", [{"eval_id": "f", "model": "m", "traj_id": "t", "turn": 1}])
    for table in ("eval_passk", "eval_tools"):
        for path in store.shards(table):
            old = pq.read_table(path).drop_columns(list(S.table(table).added))
            pq.write_table(old.replace_schema_metadata({S.VERSION_KEY: b"1", S.TABLE_KEY: table.encode()}), path)
            relist(store, path, table)
    assert store.rows("eval_passk")[0]["attempts"] is None and store.rows("eval_tools")[0]["reason_code"] is None
    query = "SELECT count(a) AS n FROM eval_passk LEFT JOIN unnest(attempts) AS t(a) ON true"
    out = CliRunner().invoke(app, ["sql", "-r", str(run_dir), "-f", "csv", query])
    assert out.exit_code == 0 and out.output.splitlines()[-1] == "0", out.output
