"""SFT on accepted trajectories: exact tokens where stored, assistant-only loss from messages otherwise."""

from __future__ import annotations

import torch
from typer.testing import CliRunner

from tests.train.conftest import KV_QUESTION, kv_conversation
from trajkit.accepted import add_review
from trajkit.cli import app
from trajkit.store import Store
from trajkit.train.data import sft_rows


def _write_trajectories(run_dir, server_rows, tokenizer_dir):
    from trajkit.train.weights import load_tokenizer

    tok = load_tokenizer(str(tokenizer_dir))
    messages, tools = kv_conversation(server_rows)
    hi = [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "Hi there!"}]
    prompt = tok.apply_chat_template(hi[:1], add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    # what the model sampled, as the chat template renders the answer: the trace matches the messages
    completion = tok("<think>\n\n</think>\n\nHi there!<|im_end|>", add_special_tokens=False)["input_ids"]
    drifted = tok("Hello there!<|im_end|>", add_special_tokens=False)["input_ids"]  # not what the messages say
    traced = {"messages": hi, "token_ids": prompt + completion, "loss_mask": [0] * len(prompt) + [1] * len(completion)}
    store = Store(run_dir, create=True)
    store.write("tasks", "import", [{"task_id": t, "question": "q", "mode": "imported"} for t in ("kv", "hi", "bad")])
    store.write(
        "trajectories",
        "rollouts",
        [
            {"traj_id": "msgs", "task_id": "kv", "status": "completed", "messages": messages, "tools": tools},
            {"traj_id": "toks", "task_id": "hi", "status": "completed", **traced},
            {
                "traj_id": "drift",
                "task_id": "hi",
                "status": "completed",
                **traced,
                "token_ids": prompt + drifted,
                "loss_mask": [0] * len(prompt) + [1] * len(drifted),
            },
            {
                "traj_id": "flagged",
                "task_id": "hi",
                "status": "completed",
                **traced,
                "reason": "token trace: turn 2: the prompt re-renders the trace differently",
            },
            {"traj_id": "failed", "task_id": "kv", "status": "failed", "messages": messages},
            {"traj_id": "rejected", "task_id": "kv", "status": "completed", "messages": messages},
            {"traj_id": "bad-task", "task_id": "bad", "status": "completed", "messages": messages},
            {"traj_id": "wrong", "task_id": "kv", "status": "completed", "messages": messages, "verdict": "fail"},
            {"traj_id": "reviewed-out", "task_id": "kv", "status": "completed", "messages": messages},
        ],
    )
    add_review(store, "reviewed-out", "trajectory", "reject", reviewer="tester")
    store.write(
        "rejected",
        "filter",
        [
            {
                "reject_id": "r1",
                "row_id": "rejected",
                "table_name": "trajectories",
                "stage": "filter",
                "reason": "judge",
            },
            {"reject_id": "r2", "row_id": "bad", "table_name": "tasks", "stage": "filter", "reason": "contaminated"},
        ],
    )
    return store, tok, prompt, completion


def test_sft_rows_pick_tokens_where_stored_and_keep_only_accepted(run_dir, server_rows, tiny_model_dir):
    store, _, prompt, completion = _write_trajectories(run_dir, server_rows, tiny_model_dir)
    rows = {r["traj_id"]: r for r in sft_rows(store)}
    assert set(rows) == {"msgs", "toks", "drift", "flagged"}
    assert rows["toks"]["input_ids"] == prompt + completion
    assert rows["toks"]["assistant_masks"] == [0] * len(prompt) + [1] * len(completion)
    assert "input_ids" not in rows["flagged"] and rows["flagged"]["trace_mismatch"].startswith("token trace:")
    assert rows["msgs"]["messages"][1]["tool_calls"][0]["function"]["arguments"] == {"key": "x", "value": "7"}
    assert rows["msgs"]["tools"][0]["function"]["name"] == "set"
    assert all("messages" in r and "input_ids" not in r for r in sft_rows(store, use_tokens=False))


def test_traces_that_differ_from_the_training_rendering_fall_back_to_messages(run_dir, server_rows, tiny_model_dir):
    from collections import Counter

    from trajkit.train.sft import check_traces
    from trajkit.train.weights import load_tokenizer

    store, *_ = _write_trajectories(run_dir, server_rows, tiny_model_dir)
    counts: Counter = Counter()
    rows = {r["traj_id"]: r for r in check_traces(load_tokenizer(str(tiny_model_dir)), sft_rows(store), counts)}
    assert {t: "input_ids" in r for t, r in rows.items()} == {
        "msgs": False,
        "toks": True,
        "drift": False,
        "flagged": False,
    }
    assert counts["examples.trace_mismatch"] == 2  # drift (found here) and flagged (found by the agent loop)
    assert rows["drift"]["messages"][-1]["content"] == "Hi there!"  # trained on what the messages say


def test_messages_render_with_loss_on_assistant_turns_only(server_rows, tiny_model_dir):
    from trajkit.export import openai_tools
    from trajkit.models.chat import to_template
    from trajkit.train.sft import render_messages
    from trajkit.train.weights import load_tokenizer

    tok = load_tokenizer(str(tiny_model_dir))
    messages, tools = kv_conversation(server_rows)
    (row,) = render_messages(tok, [{"traj_id": "t", "messages": to_template(messages), "tools": openai_tools(tools)}])
    trained = tok.decode([t for t, m in zip(row["input_ids"], row["assistant_masks"]) if m])
    ignored = tok.decode([t for t, m in zip(row["input_ids"], row["assistant_masks"]) if not m])
    assert '"name": "set"' in trained and "Done." in trained and "<|im_end|>" in trained
    assert "ok: x = 7" in ignored and KV_QUESTION in ignored and "<tools>" in ignored
    assert "ok: x = 7" not in trained and KV_QUESTION not in trained


def test_sft_command_trains_and_saves_full_weights(run_dir, server_rows, tiny_model_dir):
    from trajkit.train.weights import load_model

    store, *_ = _write_trajectories(run_dir, server_rows, tiny_model_dir)
    args = [
        "train",
        "sft",
        "--run",
        str(run_dir),
        "--model",
        str(tiny_model_dir),
        "--set",
        "sft.max_steps=2",
        "--set",
        "sft.learning_rate=1e-3",
        "--set",
        "sft.per_device_train_batch_size=2",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    out = run_dir / "models" / "sft"
    assert (out / "model.safetensors").is_file() and (out / "tokenizer_config.json").is_file()
    before, after = load_model(str(tiny_model_dir)), load_model(str(out))
    assert any(not torch.equal(a, b) for a, b in zip(before.parameters(), after.parameters()))
    rows = store.rows("train_metrics")
    assert [r["step"] for r in rows] == [1, 2] and all(r["loss"] > 0 for r in rows)
    manifest = store.manifest("sft")
    assert manifest["counts"]["examples.tokens"] == 1 and manifest["counts"]["examples.messages"] == 3
    assert manifest["counts"]["examples.trace_mismatch"] == 2
    assert (run_dir / "plots" / "sft.png").is_file()


def test_no_trained_token_within_max_length_is_a_user_error(run_dir, server_rows, tiny_model_dir):
    """TRL truncates each example to max_length and drops those left without loss: with none left it raised
    a traceback (num_samples=0); the stage says why in one line, and leaves no folder of its own."""
    from trajkit.errors import UserError

    _write_trajectories(run_dir, server_rows, tiny_model_dir)
    args = ["train", "sft", "--run", str(run_dir), "--model", str(tiny_model_dir), "--set", "sft.max_length=8"]
    result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, UserError), result.output + repr(result.exception)
    assert str(result.exception).startswith("stage 'sft': no example has a trained token within sft.max_length (8 ")
    assert not (run_dir / "_stages" / "sft").exists()
