"""The card's training-ready views on a run built by the synth stages: `sft` loads with `datasets` as the
pushed card declares it, renders through Qwen3's chat template with `tools=`, and feeds TRL's SFTTrainer;
`rl` carries prompts and verifiers; human reviews reach the views, and a stale card is not pushed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.test_cli import invoke
from tests.test_user_errors import user_error
from trajkit.accepted import accepted_ids, add_review
from trajkit.export import openai_messages, openai_tools
from trajkit.store import Store


@pytest.fixture(scope="module")
def carded(clean_pipeline, tmp_path_factory) -> Path:
    """The synth pipeline's run (rollouts with verdicts, judge, filter, extensions) with its card. Read-only."""
    run = tmp_path_factory.mktemp("views") / "run"
    shutil.copytree(clean_pipeline, run)
    invoke("card", "--run", str(run), "--examples", "0")
    return run


def _clone(run: Path, hub, dest: Path) -> Path:
    """Push the run through the CLI to the fake Hub and copy the repository's files out, as `datasets` sees them."""
    invoke("push", "--run", str(run), "--repo", "alice/agents", "--endpoint", hub.url)
    for path, (_, content) in hub.repos["alice/agents"].files.items():
        (dest / path).parent.mkdir(parents=True, exist_ok=True)
        (dest / path).write_bytes(content)
    return dest


def _load(clone: Path, config: str, cache: Path):
    import datasets

    return datasets.load_dataset(str(clone), config, split="train", cache_dir=str(cache))


def test_sft_view_renders_with_qwen3_tools_and_trains_with_trl(
    carded, hub, tmp_path, qwen3_tokenizer, tiny_model_dir, tiny_tokenizer
):
    from trl import SFTConfig, SFTTrainer

    store = Store(carded)
    clone = _clone(carded, hub, tmp_path / "clone")
    sft = _load(clone, "sft", tmp_path / "cache")
    # accepted trajectories only: the verifier's failures and the filter's rejections stay out
    verdicts = {r["traj_id"]: r["verdict"] for r in store.rows("trajectories", ["traj_id", "verdict"])}
    assert "fail" in verdicts.values()
    assert sorted(sft["traj_id"]) == sorted(accepted_ids(store, "trajectories")) and len(sft) > 0
    assert {verdicts[i] for i in sft["traj_id"]} <= {"pass", None}

    # the view's SQL gives the shapes `trajkit export --format openai` writes, row for row
    stored = {r["traj_id"]: r for r in store.rows("trajectories", ["traj_id", "messages", "tools"])}
    for r in sft:
        assert [{k: v for k, v in m.items() if v is not None} for m in r["messages"]] == openai_messages(
            stored[r["traj_id"]]["messages"]
        )
        assert r["tools"] == openai_tools(stored[r["traj_id"]]["tools"])

    row = next(r for r in sft if any(m["tool_calls"] for m in r["messages"]))
    assert row["tools"] and all(t["type"] == "function" for t in row["tools"])
    assert all(isinstance(t["function"]["parameters"], dict) for t in row["tools"])
    assert row["tools"][0]["function"]["parameters"]["type"] == "object"
    text = qwen3_tokenizer.apply_chat_template(row["messages"], tools=row["tools"], tokenize=False)
    tools_block = text.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]  # one JSON tool per line
    assert [json.loads(line) for line in tools_block.splitlines()] == row["tools"]
    call = next(m for m in row["messages"] if m["tool_calls"])["tool_calls"][0]["function"]
    assert f'<tool_call>\n{{"name": "{call["name"]}", "arguments": {call["arguments"]}}}\n</tool_call>' in text
    assert "input_schema" not in text

    args = SFTConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=1,
        per_device_train_batch_size=2,
        max_length=512,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        dataloader_num_workers=0,
    )
    trainer = SFTTrainer(model=str(tiny_model_dir), args=args, train_dataset=sft, processing_class=tiny_tokenizer)
    first = tiny_tokenizer.decode(trainer.train_dataset[0]["input_ids"])
    assert "<tools>" in first and f'"name": "{row["tools"][0]["function"]["name"]}"' in first
    assert trainer.train().global_step == 1


def test_rl_view_has_prompts_verifiers_and_annotations(carded, hub, tmp_path):
    store = Store(carded)
    rl = _load(_clone(carded, hub, tmp_path / "clone"), "rl", tmp_path / "cache")
    tasks = {t["task_id"]: t for t in store.rows("tasks")}
    with_prompt = {t for t in accepted_ids(store, "tasks") if tasks[t]["question"]}
    assert sorted(rl["task_id"]) == sorted(with_prompt) and len(rl) < len(tasks)
    assert set(rl.column_names) >= {"prompt", "verifier_kind", "verifier_spec", "difficulty", "split", "stage"}
    for r in rl:
        task = tasks[r["task_id"]]
        assert r["prompt"][-1] == {"role": "user", "content": task["question"]}
        assert r["verifier_kind"] == ((task["verifier"] or {}).get("kind") or "none")
        assert json.loads(r["verifier_spec"]) == json.loads((task["verifier"] or {}).get("spec") or "{}")
        if task["server_ids"]:
            assert {t["function"]["name"] for t in r["tools"]} >= set(task["target_tools"] or [])
    assert any(r["tools"] for r in rl)


def test_card_applies_reviews_and_a_stale_card_is_not_pushed(carded, hub, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(carded, run)
    store = Store(run)
    kept = min(accepted_ids(store, "trajectories"))
    add_review(store, kept, "trajectory", "reject", "wrong tool", "ann")
    refused = user_error("push", "--run", str(run), "--repo", "alice/agents", "--endpoint", hub.url)
    assert refused.startswith("the card is older than the newest review (")
    assert hub.repos == {}

    out = invoke("card", "--run", str(run), "--examples", "0").output
    assert f"views: sft {len(accepted_ids(store, 'trajectories')):,} rows, rl " in out
    readme = (run / "card" / "README.md").read_text()
    assert "Human reviews applied: 1, the newest from" in readme
    sft = _load(_clone(run, hub, tmp_path / "clone"), "sft", tmp_path / "cache")
    assert kept not in sft["traj_id"] and sorted(sft["traj_id"]) == sorted(accepted_ids(store, "trajectories"))


def test_a_label_marked_excludes_leaves_the_cards_views_and_is_counted(carded, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(carded, run)
    (run / "labels.yaml").write_text(
        "labels:\n  - {name: off-topic, key: o, color: '#c00', excludes: true}\n  - {name: gold, key: g, color: '#0a0'}\n"
    )
    store = Store(run)
    labelled, gold = sorted(accepted_ids(store, "trajectories"))[:2]
    add_review(store, labelled, "trajectory", "accept", None, "ann", labels=["off-topic"])
    add_review(store, gold, "trajectory", None, None, "ann", labels=["gold"])
    invoke("card", "--run", str(run), "--examples", "0")
    readme = (run / "card" / "README.md").read_text()
    assert "Labels in force: `off-topic` 1 rows (left out), `gold` 1 rows." in readme
    import pyarrow.parquet as pq

    sft = {
        t for p in (run / "card" / "data" / "sft").glob("*.parquet") for t in pq.read_table(p)["traj_id"].to_pylist()
    }
    assert labelled not in sft and gold in sft and sft == accepted_ids(store, "trajectories")
