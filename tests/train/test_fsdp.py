"""FSDP2 on CPU: two processes over gloo shard the tiny model with PyTorch's ``fully_shard``.

accelerate turns its FSDP config into plain DDP on CPU, so this test drives
PyTorch's FSDP2 directly: the parameters must be DTensors sharded across the
two ranks, a training step must run, and ``save_weights`` must gather full
safetensors that reload in one process with the same logits.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import torch
import torch.multiprocessing as mp
from safetensors import safe_open


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, model_dir: str, out_dir: str, result_dir: str) -> None:
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    from trajkit.train.weights import load_model, load_tokenizer, save_weights

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = load_model(model_dir)
        full_sizes = {n: p.numel() for n, p in model.named_parameters()}
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
        params = dict(model.named_parameters())
        assert params and all(isinstance(p, DTensor) for p in params.values())
        assert sum(p.to_local().numel() for p in params.values()) < sum(full_sizes.values())
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        ids = torch.arange(1, 17).reshape(2, 8)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        save_weights(model, load_tokenizer(model_dir), out_dir, is_main=rank == 0)
        with torch.no_grad():
            logits = model(input_ids=ids).logits
        if rank == 0:
            torch.save(
                {"logits": logits, "local": {n: p.to_local().numel() for n, p in params.items()}},
                Path(result_dir) / "r0.pt",
            )
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_fully_shard_two_processes_and_full_save(tiny_model_dir, tmp_path):
    from trajkit.train.weights import load_model

    base = load_model(str(tiny_model_dir))  # also warms the imports the forked workers inherit
    out = tmp_path / "weights"
    mp.start_processes(
        _worker,
        args=(2, _free_port(), str(tiny_model_dir), str(out), str(tmp_path)),
        nprocs=2,
        join=True,
        start_method="fork",
    )
    result = torch.load(tmp_path / "r0.pt")
    reloaded = load_model(str(out))
    # the saved weights are full tensors (not shards) and include the step just taken
    assert sum(p.numel() for p in reloaded.parameters()) == sum(p.numel() for p in base.parameters())
    assert sum(result["local"].values()) < sum(p.numel() for p in base.parameters())
    changed = [n for (n, p), q in zip(reloaded.named_parameters(), base.parameters()) if not torch.equal(p, q)]
    assert changed
    ids = torch.arange(1, 17).reshape(2, 8)
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids).logits, result["logits"], rtol=1e-5, atol=1e-5)
    assert (out / "model.safetensors").is_file() and (out / "tokenizer_config.json").is_file()
    assert base.config.tie_word_embeddings
    with safe_open(out / "model.safetensors", "pt") as f:
        assert "lm_head.weight" not in set(f.keys())  # the tied head is stored once, as the embeddings


def test_a_tied_head_is_saved_once_even_from_separate_copies(tiny_model_dir, tmp_path, monkeypatch):
    """On a GPU each name is copied to the CPU on its own; the tied copies must still be written once."""
    from trajkit.train import weights

    model = weights.load_model(str(tiny_model_dir))
    original = type(model).state_dict
    monkeypatch.setattr(
        type(model), "state_dict", lambda self, *a, **kw: {k: v.clone() for k, v in original(self, *a, **kw).items()}
    )
    state = weights.full_state_dict(model)
    assert state["lm_head.weight"] is state["model.embed_tokens.weight"]
    weights.save_weights(model, None, tmp_path / "w")
    with safe_open(tmp_path / "w" / "model.safetensors", "pt") as f:
        assert "lm_head.weight" not in set(f.keys())
