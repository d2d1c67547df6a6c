"""Any table of the run, browsable: a page of its stored rows (its own columns, as its shards hold them)
and a summary of each column: type, nulls, distinct values, and a small histogram for numbers.

A summary is computed once per change of its table (a review changes only ``reviews``). Distinct values
are counted exactly in tables of up to ``EXACT_ROWS`` rows, approximately (HyperLogLog) above. Nested columns
(lists, structs) are summarised by their nulls alone, and only in tables of up to ``NESTED_ROWS`` rows:
counting a million conversations' nulls reads every message.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from trajkit import schema as S
from trajkit.view.db import RunDB

PAGE_SIZE = 50
BINS = 10
NESTED_ROWS = 100_000
EXACT_ROWS = 100_000
CELL = 200  # characters of a cell shown


def source(db: RunDB, name: str) -> str | None:
    """The view of a table's stored rows (None when the run has none): reviews are in memory, the others
    in their shards (``_raw_`` views: an annotation written by several stages has one row per key)."""
    if name == "reviews":
        return "reviews"
    return f'"_raw_{name}"' if db.store.shards(name) else None


def table_page(db: RunDB, name: str, page: int) -> dict[str, Any] | None:
    """One page of a table's rows (cells as text, cut at ``CELL`` characters) and its columns' summaries;
    None for a name that is not a table."""
    if name not in S.TABLES:
        return None
    tbl = S.TABLES[name]
    src = source(db, name)
    total = db.rows(f"SELECT count(*) AS n FROM {src}")[0]["n"] if src else 0
    pages = max(1, -(-total // PAGE_SIZE))
    page = min(max(page, 1), pages)
    rows = []
    if src:
        data = db.query(f"SELECT * FROM {src} LIMIT ? OFFSET ?", [PAGE_SIZE, (page - 1) * PAGE_SIZE])
        rows = [[(cell(v), v if isinstance(v, str) else None) for v in r.values()] for r in data.to_pylist()]
    return {
        "table": name,
        "doc": tbl.doc,
        "key": tbl.key,
        "columns": tbl.schema.names,
        "rows": rows,
        "total": total,
        "page_no": page,
        "pages": pages,
        "summaries": db.memo(f"summary_{name}", lambda: summaries(db, name, src, total), frozenset({name})),
        "approximate": total > EXACT_ROWS,
    }


def summaries(db: RunDB, name: str, src: str | None, total: int) -> list[dict[str, Any]]:
    """Each column's type, nulls, distinct values (approximate above ``EXACT_ROWS`` rows) and, for numbers, min, max and a histogram
    of ``BINS`` equal bins (counts, with each bin's height in 0-20 for the page's bars)."""
    out = []
    for field in S.TABLES[name].schema:
        nested = pa.types.is_nested(field.type)
        numeric = pa.types.is_integer(field.type) or pa.types.is_floating(field.type)
        s: dict[str, Any] = {"column": field.name, "type": str(field.type), "nulls": None, "distinct": None}
        s["hist"] = None
        if src is None or (nested and total > NESTED_ROWS):
            out.append(s)
            continue
        col = '"' + field.name + '"'
        distinct = (
            f"least(approx_count_distinct({col}), count({col}))" if total > EXACT_ROWS else f"count(DISTINCT {col})"
        )
        stats = f", {distinct} AS d" if not nested else ""
        stats += f", min({col})::DOUBLE AS lo, max({col})::DOUBLE AS hi" if numeric else ""
        row = db.rows(f"SELECT count(*) - count({col}) AS nulls{stats} FROM {src}")[0]
        s.update(nulls=row["nulls"], distinct=row.get("d"))
        if numeric and row["lo"] is not None:
            s["hist"] = _histogram(db, src, col, row["lo"], row["hi"])
        out.append(s)
    return out


def _histogram(db: RunDB, src: str, col: str, lo: float, hi: float) -> dict[str, Any]:
    width = (hi - lo) / BINS or 1.0
    found = db.rows(
        f"SELECT least(floor(({col} - ?) / ?), {BINS - 1})::INTEGER AS b, count(*) AS n FROM {src} "
        f"WHERE {col} IS NOT NULL GROUP BY 1",
        [lo, width],
    )
    counts = [0] * BINS
    for r in found:
        counts[r["b"]] = r["n"]
    top = max(counts) or 1
    bars = [{"n": n, "h": round(n / top * 20, 1), "from": lo + i * width} for i, n in enumerate(counts)]
    return {"lo": lo, "hi": hi, "bars": bars}


def cell(value: Any, width: int = CELL) -> str:
    """A value as table text: null as ``null``, nested values as JSON, cut at ``width`` characters."""
    if value is None:
        return "null"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"
