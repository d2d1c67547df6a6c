"""Tiny local models: random weights, a real tokenizer and Qwen3's chat template, built offline in seconds.

Tests and the demo cannot download from the Hub, so they build their models
here. ``train_tokenizer`` trains a small byte-level BPE (Qwen2's pre-tokenizer,
all of Qwen3's special tokens with the same flags) and attaches Qwen3's chat
template verbatim: TRL recognizes templates by exact string, so it swaps in its
prefix-preserving training template and its tool-call response parser exactly
as it would for a real Qwen3. ``make_tiny_model`` writes a seeded random-weight
causal LM (Qwen3 architecture by default) that ``AutoModelForCausalLM``, TRL
and an OpenAI-compatible server load from the directory.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trajkit.errors import UserError

TEMPLATE_DIR = Path(__file__).parent / "templates"

# Qwen3's added tokens in id order, with their `special` flags (the tool-call and
# think tags are not special: they survive skip_special_tokens, as in Qwen3).
QWEN3_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)
QWEN2_PRETOKENIZE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
TINY_SHAPE: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": True,
}
# The shape of Qwen2.5-0.5B (its embedding rows included), for GPU benchmarks with random weights.
QWEN2_0_5B_SHAPE: dict[str, Any] = {
    "architecture": "qwen2",
    "vocab_size": 151936,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": True,
}


def qwen3_chat_template() -> str:
    """Qwen3's chat template, byte for byte (the one TRL's ``qwen3.jinja`` holds)."""
    return (TEMPLATE_DIR / "qwen3.jinja").read_text(encoding="utf-8")


def default_corpus() -> list[str]:
    """Text that covers what tiny models see: chat markup, JSON tool calls, English, code, numbers."""
    tool_call = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
    schema = (
        '{"type": "function", "function": {"name": "search", "description": "Search the web for a query.", '
        '"parameters": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}, '
        '"required": ["query"]}}}'
    )
    lines = [
        "# Tools\n\nYou may call one or more functions to assist with the user query.",
        "You are provided with function signatures within <tools></tools> XML tags:",
        "For each function call, return a json object with function name and arguments within XML tags:",
        schema,
        tool_call,
        '<tool_response>\n{"result": 3}\n</tool_response>',
        "<think>\nThe user wants the sum of two numbers, so I call the add tool.\n</think>\n\nThe answer is 3.",
        "You are a helpful assistant. Answer the question and put the final answer in \\boxed{}.",
        "What is the capital of France? The capital of France is Paris.",
        "Write a Python function that returns the factorial of n.",
        "def factorial(n: int) -> int:\n    if n <= 1:\n        return 1\n    return n * factorial(n - 1)\n",
        "import json\nfor i in range(10):\n    print(json.dumps({'index': i, 'value': i * i}))\n",
        "The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step.",
        "Solve for x: 2x + 3 = 11. Subtract 3 from both sides, then divide by 2: x = 4.",
        "0 1 2 3 4 5 6 7 8 9 10 11 12 42 100 256 1024 3.14159 -7 1e-5",
        "ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
        "Agents read files, write files, list directories, fetch web pages and query databases through tools.",
        '{"name": "read_file", "arguments": {"path": "/tmp/notes.txt"}}',
        '{"name": "write_file", "arguments": {"path": "out.md", "content": "Hello, world!"}}',
        '{"name": "get_weather", "arguments": {"city": "Berlin", "unit": "celsius"}}',
        '{"name": "sql_query", "arguments": {"query": "SELECT count(*) FROM users WHERE active = true"}}',
        "The weather in Berlin is sunny with a temperature of 21 degrees. Tomorrow it will rain.",
        "First, we compute the derivative. Then we set it to zero and solve the resulting equation.",
        "Therefore the probability is 3/8, since there are eight equally likely outcomes.",
        "Let me check the documentation before answering; the function returns None when the key is missing.",
        (
            "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n"
            "        self.items.append(item)\n\n    def pop(self):\n        return self.items.pop()\n"
        ),
        "assert add(2, 3) == 5\nassert reverse('abc') == 'cba'\nprint(sorted([3, 1, 2]))",
        "Error: file not found. Please check the path and try again. Permission denied. Timeout exceeded.",
        "Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February March April May June",
        "one two three four five six seven eight nine ten hundred thousand million first second third last",
        "I think the user is asking about the population of the city, which I can find with the search tool.",
        "Summary: the dataset contains trajectories, tasks, samples and verdicts; each row has an identifier.",
    ]
    return lines * 4


def train_tokenizer(out_dir: str | Path, texts: Iterable[str] | None = None, vocab_size: int = 1024) -> Path:
    """Train a small byte-level BPE carrying Qwen3's special tokens and chat template; save it to ``out_dir``."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(byte_fallback=False, fuse_unk=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=max(vocab_size - len(QWEN3_ADDED_TOKENS), len(alphabet)),
        initial_alphabet=alphabet,
        min_frequency=1,
        show_progress=False,
    )
    tok.train_from_iterator(list(texts) if texts is not None else default_corpus(), trainer)
    tok.add_tokens([AddedToken(t, special=s, normalized=False) for t, s in QWEN3_ADDED_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=[t for t, s in QWEN3_ADDED_TOKENS if s and t not in ("<|endoftext|>",)],
        model_max_length=32768,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = qwen3_chat_template()
    fast.save_pretrained(out)
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "Qwen2Tokenizer"  # as Qwen3 ships it, so other loaders know the class
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    return out


def make_tiny_model(
    out_dir: str | Path,
    tokenizer: str | Path | None = None,
    seed: int = 0,
    tokenizer_vocab_size: int = 1024,
    **shape: Any,
) -> Path:
    """Write a seeded random-weight causal LM and its tokenizer to ``out_dir``; return the directory.

    ``tokenizer`` is any Hugging Face tokenizer directory (default: a small BPE
    of ``tokenizer_vocab_size`` tokens trained on the spot). ``shape``
    overrides the config (``hidden_size``, ``num_hidden_layers``, ...;
    ``architecture`` is ``qwen3`` or ``qwen2``; ``vocab_size``, the embedding
    rows, defaults to the tokenizer's size and is never below it). The
    directory is written atomically.
    """
    out = Path(out_dir).resolve()
    if out.exists() and not (out / "config.json").is_file() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} exists and is not a model directory: give a new path (a model there is replaced)")
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    out.parent.mkdir(parents=True, exist_ok=True)
    shape = {**TINY_SHAPE, **shape}
    architecture = shape.pop("architecture", "qwen3")
    rows = shape.pop("vocab_size", 0)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        if tokenizer is None:
            train_tokenizer(tmp, vocab_size=tokenizer_vocab_size)
            tok = AutoTokenizer.from_pretrained(tmp)
        else:
            tok = AutoTokenizer.from_pretrained(str(tokenizer))
            tok.save_pretrained(tmp)
        eos = tok.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tok.get_vocab() else tok.eos_token_id
        pad = tok.pad_token_id if tok.pad_token_id is not None else eos
        eos_ids = sorted({i for i in (eos, tok.eos_token_id, pad) if i is not None})
        config = AutoConfig.for_model(
            architecture, vocab_size=max(rows, len(tok)), bos_token_id=None, eos_token_id=eos, pad_token_id=pad, **shape
        )
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.generation_config = GenerationConfig(eos_token_id=eos_ids, pad_token_id=pad, bos_token_id=None)
        model.save_pretrained(tmp)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out
