"""GGUF files become model folders once (keyed by the file's sha256); SmolLM2-135M-Instruct runs end to end.

The conversion tests write tiny GGUF files with the ``gguf`` package (a
one-layer llama with a byte-level vocabulary, float32 tensors). The smoke test
uses the real model that ``make setup`` converted into ``.cache/models``
(``trajkit model smollm2``): the cached path, then load, render tools, one short
generation, parse.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.models.conftest import CACHE
from tests.models.test_parsing import ADD
from tests.test_user_errors import user_error
from trajkit.cli import app
from trajkit.models import gguf as G

TOOLS = [ADD]


def write_gguf(path: Path, architecture: str = "llama", chatml: bool = True, seed: int = 0) -> Path:
    """A one-layer float32 GGUF of ``architecture`` with a byte-level BPE vocabulary (ChatML tokens or not)."""
    import gguf
    from tokenizers import pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokens = [*alphabet, "Ġt", *(("<|im_start|>", "<|im_end|>") if chatml else ("<s>", "</s>"))]
    vocab, hidden, ffn = len(tokens), 16, 32
    w = gguf.GGUFWriter(str(path), architecture)
    w.add_name("tiny")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_block_count(1)
    w.add_context_length(128)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(hidden // 2)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([1] * (vocab - 2) + [3, 3])
    w.add_token_merges(["Ġ t"])
    w.add_bos_token_id(vocab - 2)
    w.add_eos_token_id(vocab - 1)
    rng = np.random.default_rng(seed)
    ones = np.ones(hidden, np.float32)
    for name, shape in {
        "token_embd.weight": (vocab, hidden),
        "blk.0.attn_q.weight": (hidden, hidden),
        "blk.0.attn_k.weight": (hidden // 2, hidden),
        "blk.0.attn_v.weight": (hidden // 2, hidden),
        "blk.0.attn_output.weight": (hidden, hidden),
        "blk.0.ffn_gate.weight": (ffn, hidden),
        "blk.0.ffn_up.weight": (ffn, hidden),
        "blk.0.ffn_down.weight": (hidden, ffn),
    }.items():
        w.add_tensor(name, (rng.standard_normal(shape) * 0.1).astype(np.float32))
    for name in ("output_norm.weight", "blk.0.attn_norm.weight", "blk.0.ffn_norm.weight"):
        w.add_tensor(name, ones)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_gguf_becomes_a_plain_model_folder_once_keyed_by_its_sha256(tmp_path, monkeypatch):
    from gguf import GGUFReader
    from safetensors.torch import load_file
    from trl.chat_template_utils import qwen3_chat_template as trl_qwen3

    first = write_gguf(tmp_path / "a.gguf")
    out = tmp_path / "model"
    result = CliRunner().invoke(app, ["model", "gguf", str(first), str(out)])
    assert result.exit_code == 0, result.output
    record = json.loads((out / G.RECORD).read_text())
    assert record["gguf_sha256"] == G.sha256_file(first)
    assert (record["architecture"], record["file_type"], record["template"]) == ("llama", "ALL_F32", "qwen3")
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    assert (out / "chat_template.jinja").read_text(encoding="utf-8") == trl_qwen3  # byte for byte
    weights = load_file(out / "model.safetensors")
    embd = next(t for t in GGUFReader(first).tensors if t.name == "token_embd.weight")
    assert np.array_equal(weights["model.embed_tokens.weight"].numpy(), np.asarray(embd.data))
    generation = json.loads((out / "generation_config.json").read_text())
    assert config["vocab_size"] - 1 in generation["eos_token_id"]  # <|im_end|> ends a turn

    def no_conversion(*_):
        raise AssertionError("converted again")

    monkeypatch.setattr(G, "_convert", no_conversion)
    assert G.convert_gguf(first, out) == out.resolve()  # the same file (by hash): nothing to do, offline
    second = write_gguf(tmp_path / "b.gguf", seed=1)  # the same name and shape, other weights: another hash
    with pytest.raises(AssertionError, match="converted again"):
        G.convert_gguf(second, out)
    monkeypatch.undo()
    G.convert_gguf(second, out)
    assert json.loads((out / G.RECORD).read_text())["gguf_sha256"] == G.sha256_file(second)


def test_an_unsupported_architecture_is_one_line_naming_it(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", architecture="nonesuch")
    message = user_error("model", "gguf", str(path), str(tmp_path / "out"))
    assert "GGUF architecture 'nonesuch' is not supported by transformers' GGUF loader" in message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "content, expected",
    [(b"PK\x03\x04 a zip, not a GGUF", "not a GGUF file"), (b"GGUF\x03\x00\x00\x00\x01", "not a readable GGUF file")],
)
def test_files_that_are_not_gguf_are_user_errors(tmp_path, content, expected):
    path = tmp_path / "x.gguf"
    path.write_bytes(content)
    assert expected in user_error("model", "gguf", str(path), str(tmp_path / "out"))


def test_qwen3s_template_needs_chatml_tokens_else_the_files_own(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", chatml=False)
    assert "needs ChatML's <|im_start|> and <|im_end|>" in user_error("model", "gguf", str(path), str(tmp_path / "q"))
    result = CliRunner().invoke(app, ["model", "gguf", str(path), str(tmp_path / "own"), "--template", "gguf"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "own" / G.RECORD).read_text())["template"] == "gguf"


def test_smollm2_smoke(smollm2_dir, monkeypatch):
    """SmolLM2-135M-Instruct, Q4_1 dequantized: cached by its GGUF's hash, loads, renders tools, generates, parses."""
    import asyncio

    from transformers import AutoTokenizer
    from trl.chat_template_utils import add_response_schema, get_training_chat_template, qwen3_training_chat_template

    from trajkit.models.base import ModelSpec, SamplingParams
    from trajkit.models.parsing import parse_tool_calls
    from trajkit.models.tiny import qwen3_chat_template
    from trajkit.models.transformers_backend import TransformersBackend

    gguf_file = CACHE / G.SMOLLM2.gguf_name
    assert G.read_record(smollm2_dir)["gguf_sha256"] == G.sha256_file(gguf_file) == G.SMOLLM2.gguf_sha256
    monkeypatch.setattr(G, "_convert", lambda *_: pytest.fail("converted again"))
    assert G.convert_gguf(gguf_file, smollm2_dir) == smollm2_dir  # the cached path: by the GGUF's sha256
    assert G.smollm2(cache=CACHE) == smollm2_dir

    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    assert (
        tok.chat_template == qwen3_chat_template() and get_training_chat_template(tok) == qwen3_training_chat_template
    )
    # no token of its own: <tool_call> is spelled in five tokens, and still read back from the text
    assert tok.convert_ids_to_tokens(tok.encode("<tool_call>")) == ["<", "tool", "_", "call", ">"]
    emitted = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    text = tok.decode(tok.encode(emitted + "<|im_end|>"), skip_special_tokens=True)
    _, calls, errors = parse_tool_calls(text, TOOLS)
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("add", {"a": 2, "b": 3})] and not errors
    trl_parsed = add_response_schema(tok).parse_response(
        tok.encode(emitted + "<|im_end|>"), prefix="<|im_start|>assistant\n"
    )
    assert trl_parsed["tool_calls"][0]["function"] == {"name": "add", "arguments": {"a": 2, "b": 3}}

    async def generate():
        backend = TransformersBackend(ModelSpec(model=str(smollm2_dir)))
        try:
            messages = [{"role": "user", "content": "What is 2 plus 3? Use the add tool."}]
            return (await backend.generate(messages, TOOLS, SamplingParams(temperature=0.0, max_tokens=8, seed=0)))[0]
        finally:
            await backend.aclose()

    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # on a machine shared with other jobs two threads ran 4-5x slower than one
    try:
        completion = asyncio.run(generate())
    finally:
        torch.set_num_threads(threads)
    assert completion.error is None and completion.completion_tokens >= 1
    assert completion.prompt_token_ids[:3] == tok.encode("<|im_start|>system\n")  # the tools' system turn first
    assert "<tools>" in tok.decode(completion.prompt_token_ids)
    assert completion.finish_reason in ("stop", "length", "tool_calls")
