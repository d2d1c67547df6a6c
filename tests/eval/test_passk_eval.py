"""`eval.passk` end to end: two models, tasks with and without tools, real verifiers, the report per bucket."""

from __future__ import annotations

import asyncio
import json
import re
import sys

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tests.eval.helpers import question_expression
from trajkit.eval import cli
from trajkit.eval.passk import EVAL_PASSK, EvalPasskConfig
from trajkit.models.base import ModelSpec
from trajkit.models.scripted_server import ScriptedServer
from trajkit.runner import run_stage
from trajkit.schema import content_id
from trajkit.store import Store
from trajkit.verify import pass_at_k

N, KS = 4, [1, 2, 4]


def _custom(answer: int) -> dict:
    return {"kind": "custom", "spec": json.dumps({"path": "tests.eval.helpers:exact_answer", "answer": answer})}


def script(messages, tools, body):
    """'strong' is always right; 'weak' only on even seeds (so 2 of 4 attempts pass)."""
    right = body["model"] == "strong" or body["seed"] % 2 == 0
    if tools:  # the tool task: compute with the calculator, then answer from the tool's result
        if messages[-1]["role"] == "user":
            return {"tool_calls": [{"name": "evaluate", "arguments": {"expression": question_expression(messages)}}]}
        result = float(messages[-1]["content"])
        return f"The answer is {int(result) if right else int(result) + 1}."
    expr = question_expression(messages)
    value = eval(expr)  # the test's own "a + b" questions
    return f"The answer is {value if right else value + 1}."


@pytest.fixture(scope="module")
def calculator_rows():
    from trajkit.envs.config import ServerConfig
    from trajkit.envs.discovery import discover

    cfg = ServerConfig(command=sys.executable, args=["-m", "trajkit.envs.servers.calculator"])
    rows = asyncio.run(discover({"calculator": cfg}))
    assert rows[0]["status"] == "ok", rows[0]["reason"]
    return rows


def build(run, calculator_rows) -> tuple[Store, dict[str, str]]:
    store = Store(run, create=True)
    store.write("servers", "harvest", calculator_rows)
    ids = {name: content_id("task", name) for name in ("easy-sum", "hard-sum", "train-sum", "tool")}
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
        assert {b["seed"] for b in server.chat_requests} == set(range(N))

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
    with pytest.raises(UserError, match="no tasks in split 'held_out'.*curate split"):
        run_stage(Store(run_dir), EVAL_PASSK, cfg, quiet=True)
