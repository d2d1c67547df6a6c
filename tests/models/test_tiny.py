"""Tiny local models: they load offline, carry Qwen3's template and tokens, and TRL trains them."""

from __future__ import annotations

import json

from safetensors.torch import load_file
from typer.testing import CliRunner

from trajkit.cli import app
from trajkit.models.tiny import QWEN3_ADDED_TOKENS, qwen3_chat_template


def test_the_tiny_tokenizer_has_qwen3s_tokens_and_template(tiny_tokenizer, qwen3_tokenizer):
    from trl.chat_template_utils import (
        add_response_schema,
        get_training_chat_template,
        qwen3_training_chat_template,
    )
    from trl.chat_template_utils import (
        qwen3_chat_template as trl_qwen3,
    )

    tok = tiny_tokenizer
    assert 900 <= len(tok) <= 1100 and tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    added = {t.content: t.special for t in tok.added_tokens_decoder.values()}
    assert added == dict(QWEN3_ADDED_TOKENS)
    reference = {t.content: t.special for t in qwen3_tokenizer.added_tokens_decoder.values()}
    assert added == reference  # the same tokens, with the same special flags, as Qwen3's real tokenizer
    assert tok.chat_template == qwen3_chat_template() == trl_qwen3  # verbatim: TRL recognizes it
    assert get_training_chat_template(tok) == qwen3_training_chat_template
    answer = '<think>\nok\n</think>\n\n<tool_call>\n{"name": "add", "arguments": {"a": 3}}\n</tool_call><|im_end|>'
    parsed = add_response_schema(tok).parse_response(tok.encode(answer), prefix="<|im_start|>assistant\n")
    assert parsed["tool_calls"][0]["function"] == {"name": "add", "arguments": {"a": 3}}
    text = "héllo wörld ✓ <tool_call>{}</tool_call>"
    assert tok.decode(tok.encode(text)) == text
    assert len(tok.encode("<think>")) == 1


def test_qwen3s_real_tokenizer_renders_tool_calls(qwen3_tokenizer):
    tok = qwen3_tokenizer
    assert len(tok) == 151669 and tok.convert_tokens_to_ids("<tool_call>") == 151657
    messages = [{"role": "user", "content": "hi"}]
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    prompt = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    assert '<tools>\n{"type": "function", "function": {"name": "add"' in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


def test_the_tiny_model_loads_offline(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert type(model).__name__ == "Qwen3ForCausalLM" and model.config.hidden_size == 64
    assert sum(p.numel() for p in model.parameters()) < 200_000
    assert model.generation_config.eos_token_id == sorted({model.config.eos_token_id, model.config.pad_token_id})


def test_trl_trains_the_tiny_model(tiny_model_dir, tmp_path):
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    rows = [
        {"messages": [{"role": "user", "content": f"What is {i} + {i}?"}, {"role": "assistant", "content": str(2 * i)}]}
        for i in range(4)
    ]
    args = SFTConfig(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=2,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        use_cpu=True,
        dataloader_num_workers=0,
    )
    trainer = SFTTrainer(model=str(tiny_model_dir), args=args, train_dataset=Dataset.from_list(rows))
    result = trainer.train()
    assert result.global_step == 2 and result.training_loss > 0


def test_the_cli_writes_seeded_models(tmp_path, qwen3_tokenizer_dir):
    runner = CliRunner()
    small = ["--hidden", "32", "--layers", "1", "--vocab-size", "600"]
    for name, seed in (("a", "1"), ("b", "1"), ("c", "2")):
        result = runner.invoke(app, ["model", "tiny", str(tmp_path / name), "--seed", seed, *small])
        assert result.exit_code == 0, result.output
    a, b, c = (load_file(tmp_path / n / "model.safetensors") for n in "abc")
    assert all((a[k] == b[k]).all() for k in a) and not all((a[k] == c[k]).all() for k in a)
    config = json.loads((tmp_path / "a" / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]) == (32, 1, 600)

    result = runner.invoke(
        app, ["model", "tiny", str(tmp_path / "q"), "--tokenizer", str(qwen3_tokenizer_dir), *small[:4]]
    )
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "q" / "config.json").read_text())["vocab_size"] == 151669
    bad = runner.invoke(app, ["model", "tiny", str(tmp_path / "x"), "--hidden", "30"])
    assert bad.exit_code != 0
