"""SQL benchmark: 1,000,000 synthetic trajectories; side-column filter vs nested filter.

Reports, side by side in one run: the store's write rate; DuckDB (through the
run's views, as `trajkit sql` runs it) filtering trajectories that called a
given tool with the `tools_called` side column versus the same filter over the
nested `messages`; and polars for the same two queries.
Goal: side column >= 20x faster than nested, and under 0.2 s.

    python bench/sql.py [--rows 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from synthetic import write_trajectories

from trajkit.store import Store

TOOL = "get_weather"
SIDE_SQL = f"SELECT count(*) FROM trajectories WHERE list_contains(tools_called, '{TOOL}')"
NESTED_SQL = (
    "SELECT count(*) FROM trajectories WHERE "
    f"len(list_filter(messages, lambda m: list_contains(list_transform(m.tool_calls, lambda c: c.name), '{TOOL}'))) > 0"
)


def best_of(fn, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import polars as pl

    with tempfile.TemporaryDirectory() as tmp:
        write_s = write_trajectories(tmp, args.rows)
        store = Store(tmp)
        con = store.duckdb()
        files = [str(p) for p in store.shards("trajectories")]
        side_t, side_n = best_of(lambda: con.execute(SIDE_SQL).fetchone()[0], args.repeat)
        nested_t, nested_n = best_of(lambda: con.execute(NESTED_SQL).fetchone()[0], args.repeat)
        assert side_n == nested_n, (side_n, nested_n)
        lf = pl.scan_parquet(files)
        pl_side = lambda: lf.filter(pl.col("tools_called").list.contains(TOOL)).select(pl.len()).collect().item()
        pl_nested = lambda: (
            lf.filter(
                pl.col("messages")
                .list.eval(
                    pl.element()
                    .struct.field("tool_calls")
                    .list.eval(pl.element().struct.field("name") == TOOL)
                    .list.any()
                )
                .list.any()
            )
            .select(pl.len())
            .collect()
            .item()
        )
        pls_t, pls_n = best_of(pl_side, args.repeat)
        pln_t, pln_n = best_of(pl_nested, args.repeat)
        assert pls_n == pln_n == side_n, (pls_n, pln_n, side_n)

    print(
        f"rows: {args.rows:,}   matching '{TOOL}': {side_n:,}   write rate: {args.rows / write_s:,.0f} rows/s ({write_s:.1f} s)"
    )
    print(f"{'engine':<8} {'side column (s)':>16} {'nested (s)':>12} {'speed-up':>9}")
    print(f"{'duckdb':<8} {side_t:>16.3f} {nested_t:>12.3f} {nested_t / side_t:>8.1f}x")
    print(f"{'polars':<8} {pls_t:>16.3f} {pln_t:>12.3f} {pln_t / pls_t:>8.1f}x")
    ok = nested_t / side_t >= 20 and side_t < 0.2
    print(f"goal (duckdb side >= 20x nested and < 0.2 s): {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
