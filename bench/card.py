"""Card benchmark: render the dataset card of a run with 1,000,000 trajectories.

Builds a run directory with the SQL benchmark's synthetic trajectories plus
matching tasks, pass@k annotations, splits and rejections, then renders the
card (``trajkit card``: DuckDB statistics, PNG plots, examples) in a fresh
process and reports its wall time and peak memory. The peer computes the same
statistics the documented Hugging Face way: ``datasets.load_dataset("parquet")``
and pandas on the columns the statistics need.
Goal: trajkit under 30 s and under 2 GiB.

    python bench/card.py [--rows 1000000] [--no-peer] [--run DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from synthetic import write_trajectories

from trajkit.schema import DIFFICULTIES
from trajkit.store import Store

# Each child prints {"seconds": ..., "peak_rss": ...} as its last line. Peak memory is VmHWM, the
# high-water mark of the child's own address space (ru_maxrss would include the parent's, from before exec).
PEAK = "int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1]) * 1024"
TRAJKIT = """
import json, sys, time
t0 = time.perf_counter()
from trajkit.data_cards.card import CARD, CardConfig
from trajkit.runner import run_stage
from trajkit.store import Store
summary = run_stage(Store(sys.argv[1]), CARD, CardConfig(), name="card", fresh=True, quiet=True)["summary"]
print(json.dumps({"seconds": time.perf_counter() - t0, "peak_rss": PEAK, "phases": summary["seconds"]}))
""".replace("PEAK", PEAK)

PEER = """
import json, sys, time
from pathlib import Path
t0 = time.perf_counter()
import pandas as pd
from datasets import load_dataset
run = Path(sys.argv[1])
files = lambda t: sorted(str(p) for p in (run / t).glob("*.parquet"))
cols = ["status", "num_turns", "num_tool_calls", "tools_called", "prompt_tokens", "completion_tokens"]
tr = load_dataset("parquet", data_files=files("trajectories"), split="train", columns=cols, cache_dir=sys.argv[2]).to_pandas()
pk = load_dataset("parquet", data_files=files("passk"), split="train", cache_dir=sys.argv[2]).to_pandas()
stats = {
    "status": tr["status"].value_counts().to_dict(),
    "turns": tr["num_turns"].value_counts().sort_index().to_dict(),
    "tool_calls": tr["num_tool_calls"].value_counts().sort_index().to_dict(),
    "tools": tr["tools_called"].explode().value_counts().head(20).to_dict(),
    "tokens": (tr["prompt_tokens"] + tr["completion_tokens"]).quantile([0.5, 0.9, 0.99]).to_dict(),
    "difficulty": pk["difficulty"].value_counts().to_dict(),
    "passk": pk.explode("pass_at").assign(k=lambda d: d["pass_at"].str["k"], v=lambda d: d["pass_at"].str["value"])
              .groupby(["difficulty", "k"])["v"].mean().to_dict(),
}
print(json.dumps({"seconds": time.perf_counter() - t0, "peak_rss": PEAK}))
""".replace("PEAK", PEAK)


def build(run: Path, rows: int) -> float:
    """Synthetic trajectories, then tasks, passk, splits and rejections for their task ids."""
    import numpy as np
    import pyarrow as pa

    t0 = time.perf_counter()
    write_trajectories(run, rows)
    store = Store(run)
    task_ids = store.sql("SELECT DISTINCT task_id FROM _raw_trajectories ORDER BY 1").column(0)
    n = len(task_ids)
    rng = np.random.default_rng(0)
    correct = rng.integers(0, 9, n).astype(np.int32)
    p1 = correct / 8
    store.write(
        "tasks",
        "synth",
        pa.table(
            {
                "task_id": task_ids,
                "question": pa.array([f"Question {i} about the weather and stocks" for i in range(n)]),
                "mode": pa.array(rng.choice(["single_tool", "multi_tool", "multi_server"], n)),
            }
        ),
    )
    pass_at = pa.array([[{"k": 1, "value": float(a)}, {"k": 4, "value": float(min(1.0, 2 * a))}] for a in p1])
    store.write(
        "passk",
        "passk",
        pa.table(
            {
                "task_id": task_ids,
                "samples": pa.array(np.full(n, 8, np.int32)),
                "correct": pa.array(correct),
                "pass_at_1": pa.array(p1),
                "pass_at": pass_at,
                "difficulty": pa.array(np.array(DIFFICULTIES)[np.minimum(correct // 2, 4)]),
            }
        ),
    )
    store.write(
        "splits",
        "split",
        pa.table({"task_id": task_ids, "split": pa.array(np.where(rng.random(n) < 0.1, "held_out", "train"))}),
    )
    rejected = store.sql("SELECT traj_id FROM _raw_trajectories WHERE status <> 'completed' LIMIT 50000").column(0)
    store.write(
        "rejected",
        "filter",
        pa.table(
            {
                "reject_id": pa.array([f"r{i}" for i in range(len(rejected))]),
                "row_id": rejected,
                "table_name": pa.array(["trajectories"] * len(rejected)),
                "stage": pa.array(["filter"] * len(rejected)),
                "reason": pa.array(rng.choice(["too_short", "tool_error", "judge_low"], len(rejected))),
            }
        ),
    )
    return time.perf_counter() - t0


def measure(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--run", type=Path, help="Reuse (or create) this run directory instead of a temporary one.")
    ap.add_argument("--no-peer", action="store_true", help="Skip the datasets + pandas peer.")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = args.run or Path(tmp) / "run"
        if not (run / "trajectories").is_dir():
            print(
                f"building a run of {args.rows:,} trajectories in {run} ({build(run, args.rows):.1f}s)", file=sys.stderr
            )
        size = sum(p.stat().st_size for p in run.glob("*/*.parquet"))
        ours = measure(TRAJKIT, str(run))
        card = (run / "card" / "README.md").read_text()
        plots = len(list((run / "card" / "plots").glob("*.png")))
        rows = [("trajkit card (stats + plots + README)", ours)]
        if not args.no_peer:
            rows.append(("datasets + pandas (stats only)", measure(PEER, str(run), str(Path(tmp) / "hf-cache"))))
        print(
            f"\nrun: {args.rows:,} trajectories, {size / 2**30:.2f} GiB of Parquet; card {len(card):,} chars, {plots} plots\n"
        )
        print(f"{'':40} {'seconds':>9} {'peak MiB':>9} {'time ratio':>11} {'memory ratio':>13}")
        for name, r in rows:
            print(
                f"{name:40} {r['seconds']:9.1f} {r['peak_rss'] / 2**20:9.0f} "
                f"{r['seconds'] / ours['seconds']:11.2f} {r['peak_rss'] / ours['peak_rss']:13.2f}"
            )
        phases = ", ".join(f"{k} {v:.1f}s" for k, v in ours["phases"].items())
        print(f"\ntrajkit phases: {phases} (the rest: imports and start-up)")
        ok = ours["seconds"] < 30 and ours["peak_rss"] < 2 * 2**30
        print(f"\ngoal (< 30 s, < 2 GiB): {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
