"""Reading record files users hand to curate: JSONL (gzipped or not), JSON, Parquet,
and directories saved with ``datasets.save_to_disk``. Rows keep the file's order."""

from __future__ import annotations

import gzip
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trajkit.errors import UserError

FORMATS = "JSONL (.jsonl, .jsonl.gz, .json), Parquet (.parquet), or a datasets directory"


def text_field(value: Any, field: str, where: str) -> str:
    """A record's text field as it will be stored: a string UTF-8 can encode (no lone surrogates)."""
    if not isinstance(value, str):
        raise UserError(f"{where}: {field} must be text, not {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise UserError(f"{where}: {field} is not valid Unicode text ({e.reason} at {e.start})") from None
    return value


def read_records(path: str | Path, columns: list[str] | None = None) -> list[dict[str, Any]]:
    """All records of a file or ``datasets`` directory, in file order."""
    return list(iter_records(path, columns))


def iter_records(path: str | Path, columns: list[str] | None = None) -> Iterator[dict[str, Any]]:
    p = Path(path)
    if not p.exists():
        raise UserError(f"file not found: {p}")
    if p.is_dir():
        yield from _datasets_dir(p, columns)
        return
    name = p.name.lower()
    if name.endswith(".parquet"):
        yield from _parquet(p, columns)
    elif name.endswith((".jsonl", ".jsonl.gz", ".json", ".json.gz", ".ndjson")):
        yield from _json_lines(p)
    else:
        raise UserError(f"{p}: unknown file type; expected {FORMATS}")


def _parquet(p: Path, columns: list[str] | None) -> Iterator[dict[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        f = pq.ParquetFile(p)
        names = f.schema_arrow.names
        wanted = [c for c in columns if c in names] if columns else None
        for batch in f.iter_batches(columns=wanted, batch_size=4096):
            yield from batch.to_pylist()
    except (pa.ArrowInvalid, OSError) as e:
        raise UserError(f"{p}: not a readable Parquet file ({str(e).splitlines()[0]})") from None


def _json_lines(p: Path) -> Iterator[dict[str, Any]]:
    opener = gzip.open if p.name.lower().endswith(".gz") else open
    try:
        with opener(p, "rt", encoding="utf-8") as f:
            skipped, first = 0, f.readline()
            while first and not first.strip():
                skipped, first = skipped + 1, f.readline()
            if first.lstrip().startswith("["):  # a JSON array of records
                for i, rec in enumerate(json.loads(first + f.read())):
                    yield _record(rec, p, i + 1)
                return
            for lineno, line in enumerate(itertools.chain([first], f), skipped + 1):
                if line.strip():
                    yield _record(_loads(line, p, lineno), p, lineno)
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise UserError(f"{p}: cannot read ({e})") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{p}: not valid JSON ({e})") from None


def _loads(line: str, p: Path, lineno: int) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        raise UserError(f"{p}:{lineno}: not valid JSON ({e.msg})") from None


def _record(rec: Any, p: Path, lineno: int) -> dict[str, Any]:
    if not isinstance(rec, dict):
        raise UserError(f"{p}:{lineno}: expected a JSON object per record, got {type(rec).__name__}")
    return rec


def _datasets_dir(p: Path, columns: list[str] | None) -> Iterator[dict[str, Any]]:
    """A directory written by ``Dataset.save_to_disk`` or ``DatasetDict.save_to_disk``
    (every split, in split-name order), or a folder of Parquet/JSONL files."""
    if not (p / "dataset_info.json").is_file() and not (p / "dataset_dict.json").is_file():
        files = sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith("."))
        files = [f for f in files if f.name.lower().endswith((".parquet", ".jsonl", ".jsonl.gz", ".json"))]
        if not files:
            raise UserError(f"{p}: no datasets directory (dataset_info.json) and no Parquet/JSONL files in it")
        for f in files:
            yield from iter_records(f, columns)
        return
    import datasets

    try:
        loaded = datasets.load_from_disk(str(p))
    except (OSError, ValueError, FileNotFoundError) as e:
        raise UserError(f"{p}: not a readable datasets directory ({e})") from None
    parts = [loaded[k] for k in sorted(loaded)] if isinstance(loaded, datasets.DatasetDict) else [loaded]
    for ds in parts:
        if columns:
            keep = [c for c in columns if c in ds.column_names]
            ds = ds.select_columns(keep)
        for batch in ds.iter(batch_size=1024):
            keys = list(batch)
            for i in range(len(batch[keys[0]]) if keys else 0):
                yield {k: batch[k][i] for k in keys}
