"""Printing and writing query results (``trajkit sql``): rich tables, CSV, JSON, Parquet.

A CSV cell is opened by spreadsheets, which run a cell that starts with ``=``, ``+``, ``-`` or ``@`` as a
formula, blanks or control characters before it too (`` =1+1``), as it does a cell that starts with a tab or a
carriage return: such a cell is written with a leading ``'``, the mark spreadsheets read as "text", so a tool
result cannot become a formula on the reader's machine. A cell holding a delimiter a spreadsheet may split on
(``,`` ``;`` ``|`` a tab), a quote, a line break (a bare ``\r`` too, which Python's ``csv`` leaves bare) or any
other control character is quoted, so no part of it starts a cell of its own (``csv_line``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path
from typing import IO

import pyarrow as pa

from trajkit.errors import UserError


def _plain(value: object) -> object:
    """JSON for what DuckDB returns: sums (HUGEINT, DECIMAL) become numbers, the rest text."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return str(value)


def json_safe(value: object) -> object:
    """JSON has no NaN or infinity: they become null, as JavaScript writes them (Python wrote ``NaN``,
    which jq and most parsers reject)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


# what a spreadsheet runs: a formula character after any blanks or control characters (fullwidth ones too), or a
# cell that starts with a tab or a carriage return
FORMULA = re.compile(r"[\t\r]|[\s\x00-\x1f\x7f-\x9f\u200b-\u200f\u2060\ufeff]*[=+\-@\uff1d\uff0b\uff0d\uff20]")
NEEDS_QUOTES = re.compile(r'[,;|"\x00-\x1f\x7f-\x9f\u2028\u2029\u200b-\u200f\u2060\ufeff]|[^\S ]')


def csv_cell(value: object) -> object:
    """A value as a CSV cell: text that a spreadsheet would run as a formula gets a leading ``'``."""
    if value is None:
        return ""
    if not isinstance(value, (str, int, float)):
        value = json.dumps(value, default=_plain)
    return "'" + value if isinstance(value, str) and FORMULA.match(value) else value


def csv_line(values: Iterable[object]) -> str:
    """One line of CSV (``\\n``-ended): each value a ``csv_cell``, quoted (``"`` doubled) when it holds a
    delimiter, a quote, a line break or a control character."""
    cells = [str(csv_cell(v)) for v in values]
    return ",".join('"' + c.replace('"', '""') + '"' if NEEDS_QUOTES.search(c) else c for c in cells) + "\n"


def _value(value: object) -> object:
    return _plain(value) if isinstance(value, Decimal) else value


def _cell(value: object, width: int = 60) -> str:
    from rich.markup import escape

    value = _value(value)
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=_plain)
    return escape(text if len(text) <= width else text[: width - 1] + "…")


def print_table(data: pa.Table, limit: int = 50) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(*data.column_names, show_lines=False)
    for row in data.slice(0, limit).to_pylist():
        table.add_row(*(_cell(v) if v is not None else "[dim]null[/]" for v in row.values()))
    console = Console()
    console.print(table)
    if data.num_rows > limit:
        console.print(f"[dim]{data.num_rows} rows, {limit} shown (--limit, or --format csv for all)[/]")


def write_table(data: pa.Table, dest: Path | IO[str], fmt: str | None = None) -> None:
    """Write a result as csv, json (an array), jsonl or parquet (by ``fmt`` or the file's suffix)."""
    if isinstance(dest, Path):
        fmt = fmt or dest.suffix.lstrip(".").lower()
        if fmt not in ("csv", "json", "jsonl", "parquet"):
            raise UserError(f"--output {dest}: use a .csv, .json, .jsonl or .parquet file")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if fmt == "parquet":
            import pyarrow.parquet as pq

            pq.write_table(data, dest)
            return
        with open(dest, "w") as f:
            write_table(data, f, fmt)
        return
    if fmt == "csv":
        dest.write(csv_line(data.column_names))
        for row in data.to_pylist():
            dest.write(csv_line(map(_value, row.values())))
    elif fmt == "jsonl":
        for row in data.to_pylist():
            dest.write(json.dumps(json_safe(row), ensure_ascii=False, default=_plain, allow_nan=False) + "\n")
    else:
        json.dump(json_safe(data.to_pylist()), dest, ensure_ascii=False, default=_plain, allow_nan=False)
        dest.write("\n")
