"""The demo end to end, shortened: examples/demo.yaml with fewer tasks and steps, run by the real CLI.

One run (module fixture) goes through every stage: harvest (the project's servers
and third-party ones through uvx), the warm-up on the reference fixture, synthesis,
pass@k on tool and HumanEval tasks, curation, SFT, two GRPO stages, evaluation of
both models and the dataset card. The tests then check each stage's tables, the
card, the summary and its example queries, and that a rerun resumes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trajkit.store import Store

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "demo.yaml"
TRAJKIT = [sys.executable, "-m", "trajkit.cli"]


def shortened(path: Path) -> Path:
    """examples/demo.yaml with fewer tasks, samples and steps (the same stages and configs otherwise)."""
    text = DEMO.read_text().replace("${here}", str(DEMO.parent))  # the copy lives elsewhere
    data = yaml.safe_load(text)
    stages = {s.get("name") or s["stage"].split(".")[-1]: s for s in data["stages"]}
    warmup = stages["warmup"]["config"]
    # the warm-up records the requests the shortened stages make (2 per mode), no more: 62 sequences
    # (12.0k tokens), learnt in 340 steps (loss 0.03; 49 of 55 first-turn trajectories pass, 9 of 11
    # rollouts kept and extended); it was the suite's largest cost at 3 per mode and 450 steps
    warmup["record"][0]["config"]["requests_per_mode"] = 2
    warmup["sft"]["max_steps"] = 340
    stages["tasks"]["config"]["requests_per_mode"] = 2
    for name in ("import",):
        stages[name]["config"]["limit"] = 8
    warmup["record"][6]["config"]["limit"] = 8
    stages["passk-code"]["config"]["k"] = 2
    # a tiny model warmed up this briefly solves little: let the hard stage take unsolved tasks too
    stages["curriculum"]["config"]["hard_difficulties"] = ["unsolved", "hard", "medium", "easy"]
    stages["sft"]["config"]["sft"]["max_steps"] = 2
    stages["grpo-broad"]["config"]["steps"] = 1
    stages["grpo-hard"]["config"]["steps"] = 1
    for name in ("eval-passk-before", "eval-passk-after"):
        stages[name]["config"].update(n=2, ks=[1, 2])
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def trajkit(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run(
        [*TRAJKIT, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=1200, check=False
    )


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("demo")
    run = tmp / "run"
    done = trajkit("run", str(shortened(tmp / "demo-short.yaml")), "--run", str(run))
    assert done.returncode == 0, done.stderr[-4000:]
    return run


def sql(run: Path, query: str) -> list[dict]:
    return Store(run).sql(query).to_pylist()


def test_harvest_and_warmup(demo_run):
    servers = {r["name"]: r for r in sql(demo_run, "SELECT name, status, num_tools FROM servers")}
    assert {n: r["status"] for n, r in servers.items()} == dict.fromkeys(
        ("calculator", "kv", "units", "time", "sqlite"), "ok"
    )
    warmup = Store(demo_run).manifest("warmup")
    counts = warmup["counts"]
    assert counts["requests_recorded"] > 50 and counts["fixture_rollouts.pass"] > 0
    assert not any(k.startswith("fixture_rollouts.") and k != "fixture_rollouts.pass" for k in counts)
    record = Store(demo_run / "warmup" / "record")  # what the model learns: judged, kept and extended
    kept = record.manifest("filter")["counts"].get("kept", 0)
    assert kept > 0 and record.manifest("extend")["summary"]["extended"] == kept
    base = demo_run / "models" / "demo-base"
    assert (base / "config.json").is_file() and (base / "tokenizer.json").is_file()
    loss = sql(
        demo_run,
        "SELECT first(loss ORDER BY step) AS a, last(loss ORDER BY step) AS b FROM train_metrics WHERE stage = 'warmup'",
    )[0]
    assert loss["b"] < loss["a"] / 4


def test_synthesis_makes_real_tasks_and_trajectories(demo_run):
    kept = sql(demo_run, "SELECT * FROM tasks WHERE source = 'synth' AND reject_reason IS NULL")
    assert kept and all(t["vs_method"] == "vs_standard" for t in kept)
    assert any(t["vs_probability"] is not None for t in kept)  # a tiny model sometimes leaves it out
    assert all(t["verifier"]["kind"] == "tool_outcome" for t in kept)
    first = sql(
        demo_run, "SELECT * FROM trajectories WHERE parent_id IS NULL AND status = 'completed' AND num_tool_calls > 0"
    )
    assert first, "no completed trajectory with tool calls"
    results = [m for t in first for m in t["messages"] if m["role"] == "tool"]
    assert any(not m["content"].startswith("Error") for m in results)  # real tool results from the servers
    assert sql(demo_run, "SELECT count(*) AS n FROM task_quality WHERE quality_score IS NOT NULL")[0]["n"] > 0
    # extend continued exactly the rollouts the filter kept (a briefly warmed-up model may get none kept)
    store = Store(demo_run)
    kept = store.manifest("filter")["counts"].get("kept", 0)
    assert store.manifest("extend")["summary"]["extended"] == kept
    assert sql(demo_run, "SELECT count(*) AS n FROM trajectories WHERE parent_id IS NOT NULL")[0]["n"] == kept


def test_curation_tags_difficulty_and_splits(demo_run):
    tagged = sql(demo_run, "SELECT source, difficulty, pass_at_1 FROM tasks WHERE difficulty IS NOT NULL")
    assert {r["source"] for r in tagged} == {"synth", "humaneval"}
    # how many buckets depends on how well the briefly warmed-up model does; the tags must match pass@1
    assert all((r["difficulty"] == "unsolved") == (r["pass_at_1"] == 0) for r in tagged)
    untagged = sql(demo_run, "SELECT count(*) AS n FROM tasks WHERE reject_reason IS NULL AND difficulty IS NULL")
    assert untagged[0]["n"] == 0  # every kept task went through pass@k
    splits = {r["split"] for r in sql(demo_run, "SELECT DISTINCT split FROM splits")}
    assert splits == {"train", "held_out"}
    stages = {r["stage"] for r in sql(demo_run, "SELECT DISTINCT stage FROM curriculum")}
    assert stages == {"broad", "hard"}


def test_training_stages_train_and_save(demo_run):
    rows = sql(demo_run, "SELECT stage, step, reward_mean, loss FROM train_metrics WHERE stage LIKE 'grpo-%'")
    assert sorted((r["stage"], r["step"]) for r in rows) == [("grpo-broad", 1), ("grpo-hard", 1)]
    assert all(r["reward_mean"] is not None and r["loss"] is not None for r in rows)
    for name in ("sft", "grpo-broad", "grpo-hard"):
        assert (demo_run / "models" / name / "model.safetensors").is_file()


def test_evaluation_compares_both_models(demo_run):
    models = {r["model"] for r in sql(demo_run, "SELECT DISTINCT model FROM eval_passk")}
    assert models == {str(demo_run / "models" / "demo-base"), str(demo_run / "models" / "grpo-hard")}
    tools = {r["model"] for r in sql(demo_run, "SELECT DISTINCT model FROM eval_tools")}
    assert tools == models


def test_card(demo_run):
    from huggingface_hub import DatasetCard

    text = (demo_run / "card" / "README.md").read_text()
    card = DatasetCard(text)
    assert {c["config_name"] for c in card.data.to_dict()["configs"]} >= {"tasks", "trajectories", "passk"}
    plots = list((demo_run / "card" / "plots").glob("*.png"))
    assert len(plots) >= 3


def test_summary_queries_run_and_rerun_resumes(demo_run, capsys):
    from trajkit.demo.summary import QUERIES, print_summary

    print_summary(demo_run)
    out = capsys.readouterr().out
    assert "stages" in out and "evaluation" in out and "trajkit sql" in out
    for _, query in QUERIES:
        done = trajkit("sql", query, "--run", str(demo_run), "--format", "json")
        assert done.returncode == 0 and json.loads(done.stdout), done.stderr
    before = {m["stage"]: m["finished_at"] for m in Store(demo_run).manifests()}
    again = trajkit("run", str(demo_run.parent / "demo-short.yaml"), "--run", str(demo_run))
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stderr.count("already complete, skipped") == len(before)
    assert {m["stage"]: m["finished_at"] for m in Store(demo_run).manifests()} == before


def test_ids_map_to_one_row(demo_run):
    from tests.test_store import ids_map_to_one_row

    ids_map_to_one_row(Store(demo_run))


def test_model_option_derives_the_pipeline_without_the_warmup(tmp_path):
    from trajkit.demo.real import with_model

    path = with_model(DEMO, tmp_path / "run", "Qwen/Qwen3-8B", "openai", "http://localhost:8000/v1")
    data = yaml.safe_load(path.read_text())
    names = [s.get("name") or s["stage"] for s in data["stages"]]
    assert path == tmp_path / "run" / "pipeline.yaml" and "warmup" not in names
    spec = {"model": "Qwen/Qwen3-8B", "backend": "openai", "base_url": "http://localhost:8000/v1"}
    models = [s["config"]["model"] for s in data["stages"] if isinstance(s.get("config", {}).get("model"), dict)]
    assert models and all(m == spec for m in models)
    sft = next(s for s in data["stages"] if s["stage"] == "train.sft")
    assert sft["config"]["model"] == "Qwen/Qwen3-8B"


def test_fixture_reads_the_quoted_data_blocks_of_judge_prompts():
    from trajkit.demo.fixture import data_block
    from trajkit.prompts import quote_data

    question, conversation = "How many?", "[user]\nHow many?"
    quoted = [quote_data(text, "0123456789abcdef") for text in (question, conversation)]
    prompt = f"## Question\n{quoted[0]}\n\n## Conversation\n{quoted[1]}\n"
    assert (data_block(prompt, "Question"), data_block(prompt, "Conversation")) == (question, conversation)


def test_warmup_config_covers_the_fixture_code(tmp_path, monkeypatch):
    """The fixture's script is part of the warm-up's config, as a model would be: a rerun after it changed
    names the difference and refuses the old recording, instead of resuming with it."""
    from trajkit.config import build, config_differences, config_hash, hashed_dict
    from trajkit.demo import warmup

    copies = tuple(tmp_path / path.name for path in warmup.FIXTURE_FILES)
    for path, copy in zip(warmup.FIXTURE_FILES, copies):
        copy.write_bytes(path.read_bytes())
    monkeypatch.setattr(warmup, "FIXTURE_FILES", copies)
    cfg = build(warmup.WarmupConfig, {"record": [{"stage": "curate.split"}]})
    old, old_hash = hashed_dict(cfg), config_hash(cfg)
    copies[0].write_text(copies[0].read_text() + "# another script\n")
    assert config_hash(cfg) != old_hash
    [differs] = config_differences(old, hashed_dict(cfg))
    assert differs.startswith("fixture: ")


async def test_the_fixtures_reference_answers_pass_the_worlds_checks(example_servers, example_servers_config):
    """Every world task on the project's servers, solved by the fixture through the real agent loop and
    judged by the verifier synthesis builds for it: the final answer is the Answer line, and it passes."""
    import asyncio

    from trajkit.demo.fixture import reply
    from trajkit.demo.world import TASKS
    from trajkit.envs.agent import AgentLimits, run_episode
    from trajkit.envs.env import ToolEnv
    from trajkit.envs.solve import trajectory_verdict
    from trajkit.models.base import Backend, Completion, ModelSpec, SamplingParams, ToolCall
    from trajkit.synth.candidates import ToolIndex, to_task

    class Fixture(Backend):  # the fixture in process (the demo serves it over HTTP only to record it)
        name = "fixture"

        async def _generate(self, messages, tools, params):
            out = reply(messages, tools)
            out = {"content": out} if isinstance(out, str) else out
            calls = [
                ToolCall(f"c{i}", c["name"], json.dumps(c["arguments"]))
                for i, c in enumerate(out.get("tool_calls") or [])
            ]
            return [Completion(out.get("content") or "", calls, reasoning=out.get("reasoning_content"))]

    ids = {r["name"]: r["server_id"] for r in example_servers}
    world = [t for t in TASKS if set(t.servers) <= set(ids)]  # sqlite runs through uvx: the demo run covers it
    backend = Fixture(ModelSpec(model="reference-fixture", backend="openai", base_url="http://unused"))
    async with ToolEnv(example_servers, config=example_servers_config) as env:

        async def solve(t):
            server_ids = [ids[s] for s in t.servers]
            fields, reason, _ = to_task(t.candidate(), ToolIndex(env.routes(server_ids)))
            assert reason is None, (t.key, reason)
            task = {"task_id": t.key, "server_ids": server_ids, **fields}
            row = await run_episode(task, backend, env, SamplingParams(max_tokens=64), AgentLimits(max_turns=5))
            return row, await trajectory_verdict(task, row)

        solved = await asyncio.gather(*(solve(t) for t in world))
    assert len(world) >= 20
    assert [t.key for t, (row, _) in zip(world, solved) if not row["final_answer"].startswith("Answer: ")] == []
    assert {t.key: verdict for t, (_, verdict) in zip(world, solved)} == dict.fromkeys((t.key for t in world), "pass")
