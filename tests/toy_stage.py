"""A small deterministic stage used by the foundation tests (store, runner, resume, CLI).

It writes ``n`` tasks in shards of ``shard_rows``, optionally sleeping between rows
so a test can kill it mid-write. Run as a script to drive it from a subprocess.
"""

from __future__ import annotations

import sys
import time

from pydantic import Field

from trajkit.config import StageConfig, Unhashed
from trajkit.runner import StageContext, StageSpec, run_stage
from trajkit.schema import content_id
from trajkit.store import Store


class ToyConfig(StageConfig):
    n: int = 100
    shard_rows: int = 10
    sleep_s: Unhashed[float] = Field(0.0)


def toy_rows(n: int) -> list[dict]:
    return [
        {
            "task_id": content_id("toy", i),
            "source_id": f"toy/{i}",
            "question": f"What is {i} + {i}?",
            "mode": "imported",
            "verifier": {"kind": "math", "spec": f'{{"answer": "{2 * i}"}}'},
        }
        for i in range(n)
    ]


def run_toy(ctx: StageContext, cfg: ToyConfig) -> dict:
    done = ctx.done("tasks")
    ctx.writer("tasks", rows_per_shard=cfg.shard_rows)
    for row in toy_rows(cfg.n):
        if row["task_id"] in done or not ctx.mine(row["task_id"]):
            continue
        ctx.write("tasks", row)
        if cfg.sleep_s:
            time.sleep(cfg.sleep_s)
    return {"n": cfg.n}


TOY = StageSpec("test.toy", ToyConfig, run_toy, outputs=("tasks",), help="A toy stage for tests.")

if __name__ == "__main__":
    run_dir, n, shard_rows, sleep_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    run_stage(Store(run_dir, create=True), TOY, ToyConfig(n=n, shard_rows=shard_rows, sleep_s=sleep_s), quiet=True)


def relist(store, path, table: str) -> None:
    """List a shard rewritten by hand as the trajkit that wrote it would have (an older or newer version's
    shard in a run it listed): its current content hash goes into its stage's ledger."""
    import pyarrow.parquet as pq

    from trajkit.store import file_hash

    store._list(path, table, file_hash(path), pq.read_metadata(path).num_rows)


def copy_table(source, dest, table: str) -> None:
    """Copy one table's shards from run ``source`` into run ``dest``, listed there as their stages listed them."""
    import shutil
    from pathlib import Path

    (Path(dest) / table).mkdir(parents=True, exist_ok=True)
    for path in Store(source).shards(table):
        relist(Store(dest), Path(shutil.copy(path, Path(dest) / table / path.name)), table)
