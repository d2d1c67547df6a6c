"""Compare two run directories table by table, timing aside: ``python scripts/compare_runs.py RUN_A RUN_B``.

Every table of each run (nested runs too, such as the demo's ``warmup/record``), the evaluation reports and
the card's data views are read whole and compared row for row, in key order. Columns that time the work
(``*_s``, ``runtime*``, ``tokens_per_s``) and timing keys inside JSON text (a trainer's ``train_runtime``,
``*_per_second``) are left out, and so are the tool-call ids the scripted server numbers by the order
requests arrive in (``call_<n>_...``, different between two runs of the same code when requests run side
by side). Rows are compared on the columns both runs have; a column only one has (a schema that gained
one) is named and counts as a difference. Prints one line per table and exits 1 if any differs. Ids hash
the model's path, so run both at the same path (move the first run away before the second starts).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

TIMING = re.compile(r"(^|_)(s|seconds|runtime|per_second|per_s|time|latency)$|runtime|per_second|_time_")


def is_timing(name: str) -> bool:
    return bool(TIMING.search(name))


def untimed(value: Any) -> Any:
    """A value without timing keys, JSON text included."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if not is_timing(k)}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return untimed(json.loads(value))
        except ValueError:
            return value
    return value


def tables(run: Path) -> dict[str, list[Path]]:
    """Parquet files by their folder relative to the run (a table, a report folder, a card view)."""
    out: dict[str, list[Path]] = {}
    for path in sorted(run.rglob("*.parquet")):
        if any(part.startswith((".", "_")) for part in path.relative_to(run).parts):
            continue
        out.setdefault(str(path.parent.relative_to(run)), []).append(path)
    return out


ARRIVAL_ID = re.compile(r"\bcall_\d+_")  # the scripted server's call ids: call_<arrival index>_<choice>_<call>


def columns(paths: list[Path]) -> set[str]:
    return {name for path in paths for name in pq.read_schema(path).names}


def rows(paths: list[Path], keep: set[str]) -> list[str]:
    out = []
    for path in paths:
        for row in pq.read_table(path).to_pylist():
            kept = untimed({k: v for k, v in row.items() if k in keep and not is_timing(k)})
            out.append(ARRIVAL_ID.sub("call_N_", json.dumps(kept, sort_keys=True, default=str)))
    return sorted(out)


def main(a: Path, b: Path) -> int:
    left, right = tables(a), tables(b)
    differ = 0
    for name in sorted(left.keys() | right.keys()):
        if name not in left or name not in right:
            print(f"{name}: only in {a if name in left else b}")
            differ += 1
            continue
        cols_a, cols_b = columns(left[name]), columns(right[name])
        x, y = rows(left[name], cols_a & cols_b), rows(right[name], cols_a & cols_b)
        same = x == y
        differ += not same or cols_a != cols_b
        extra = "" if same else f" ({len(set(x) - set(y))} rows only in {a}, {len(set(y) - set(x))} only in {b})"
        only = "".join(
            f"; COLUMNS only in {r}: {', '.join(sorted(c))} (rows compared on the others)"
            for r, c in ((a, cols_a - cols_b), (b, cols_b - cols_a))
            if c
        )
        print(f"{name}: {len(x)} vs {len(y)} rows, {'identical' if same else 'DIFFERENT'}{extra}{only}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
