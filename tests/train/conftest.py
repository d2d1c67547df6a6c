"""Fixtures for trajkit.train tests: the project's real MCP servers harvested once, a tool-calling tiny model."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

KV_QUESTION = "Store the value 7 under the key x."


@pytest.fixture(scope="session")
def server_rows(example_servers) -> list[dict]:
    """``servers`` rows of the calculator (stateless) and kv (stateful) servers, harvested for real (once a session)."""
    return [r for r in example_servers if r["name"] in ("calculator", "kv")]


def kv_conversation(server_rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """A stored-shape trajectory that sets x=7 through the kv server, and the tools it was offered."""
    from trajkit.envs.tools import offered_tools_column, tool_routes

    kv = next(r for r in server_rows if r["name"] == "kv")
    messages = [
        {"role": "user", "content": KV_QUESTION},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "name": "set", "arguments": json.dumps({"key": "x", "value": "7"})}],
        },
        {"role": "tool", "content": "ok: x = 7", "tool_call_id": "c1", "name": "set"},
        {"role": "assistant", "content": "Done."},
    ]
    return messages, offered_tools_column(tool_routes(server_rows, [kv["server_id"]]))


def _train_tool_model(out: Path, tiny_model_dir: Path, server_rows: list[dict]) -> None:
    import torch

    from trajkit.export import openai_tools
    from trajkit.models.chat import to_template
    from trajkit.train.sft import render_messages
    from trajkit.train.weights import load_model, load_tokenizer

    shutil.copytree(tiny_model_dir, out, dirs_exist_ok=True)
    tok, model = load_tokenizer(str(out)), load_model(str(out))
    messages, tools = kv_conversation(server_rows)
    row = render_messages(tok, [{"traj_id": "t", "messages": to_template(messages), "tools": openai_tools(tools)}])[0]
    ids = torch.tensor([row["input_ids"]])
    labels = ids.clone()
    labels[0, torch.tensor(row["assistant_masks"]) == 0] = -100
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(80):
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    torch.set_num_threads(threads)
    assert loss.item() < 0.1, loss.item()
    model.save_pretrained(out)


@pytest.fixture(scope="session")
def tool_model_dir(tiny_model_dir, server_rows) -> Path:
    """The tiny model trained (plain torch) to answer KV_QUESTION by calling kv's ``set``; built once, cached."""
    from tests.fixtures.models import build_once

    key = hashlib.sha256(Path(__file__).read_bytes() + str(tiny_model_dir).encode()).hexdigest()[:12]
    return build_once(f"train-tool-model-{key}", lambda out: _train_tool_model(out, tiny_model_dir, server_rows))


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """One intra-op thread: on a small shared machine (MCP servers, sandbox workers, other tests) more only contend."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
