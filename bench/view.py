"""Viewer benchmark: `trajkit view` on a synthetic run of 1,000,000 trajectories with every table populated.

Reports the time to open (the real command, from launch to its first page), the first
page of a fresh app (it builds the views and the in-memory copies of light columns that
pages look rows up in), and each page's server time (the app's Server-Timing header:
its first request, then median and worst of --repeat more, through Starlette's
in-process client; goals apply to the worst), and the worst CPU time of the process
over those requests (less sensitive than wall time to other work on a shared
machine). Goals: open < 2 s, every list page < 300 ms, a trajectory page < 100 ms.

    python bench/view.py [--rows 1000000] [--repeat 5] [--run DIR]

The run is built once into bench/out/view-<rows> (or --run) and reused.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from synthetic import write_run

from trajkit.store import Store

LIST_GOAL_MS, TRAJ_GOAL_MS, OPEN_GOAL_S = 300, 100, 2.0


def open_time(run: Path) -> float:
    """Seconds from launching `trajkit view` to its first page."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "trajkit.cli", "view", "--run", str(run), "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = re.search(r"http://\S+", proc.stderr.readline()).group(0)
        assert httpx.get(url, timeout=30).status_code == 200
        return time.perf_counter() - t0
    finally:
        proc.terminate()
        proc.wait(10)


def server_ms(client, url: str, repeat: int) -> tuple[float, float, float, float]:
    """The first request's server time, then the median and worst of ``repeat`` more, and the worst
    CPU time of this process over those ``repeat``."""
    times, cpu = [], []
    for _ in range(repeat + 1):
        c0 = time.process_time()
        r = client.get(url)
        cpu.append((time.process_time() - c0) * 1000)
        assert r.status_code == 200, (url, r.status_code, r.text[:300])
        times.append(float(r.headers["server-timing"].split("dur=")[1]))
    return times[0], statistics.median(times[1:]), max(times[1:]), max(cpu[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--run", type=Path, default=None)
    args = ap.parse_args()
    run = args.run or Path(__file__).resolve().parent / "out" / f"view-{args.rows}"
    if not (run / "_ready").exists():
        t0 = time.perf_counter()
        counts = write_run(run, args.rows)
        (run / "_ready").touch()
        print(f"built {run} in {time.perf_counter() - t0:.0f} s: {counts}")
    from starlette.testclient import TestClient

    from trajkit.view.app import create_app
    from trajkit.view.db import RunDB

    store = Store(run)
    one = lambda q: store.sql(q).column(0)[0].as_py()
    task = one("SELECT task_id FROM trajectories GROUP BY 1 ORDER BY count(*) DESC LIMIT 1")
    plain = one("SELECT traj_id FROM trajectories WHERE token_ids IS NULL AND num_tool_calls = 5 LIMIT 1")
    traced = one("SELECT traj_id FROM trajectories WHERE token_ids IS NOT NULL ORDER BY len(token_ids) DESC LIMIT 1")
    reason = one("SELECT reason FROM rejected WHERE table_name = 'tasks' LIMIT 1")
    opened = open_time(run)
    pages = [
        ("list", "run", "/"),
        ("list", "tasks", "/tasks"),
        ("list", "tasks, 4 filters", "/tasks?difficulty=hard&split=train&mode=multi_tool&min_quality=3"),
        ("list", "tasks, by judge score", "/tasks?sort=quality&dir=desc"),
        ("list", "tasks, page 1000", "/tasks?page=1000"),
        ("list", "tasks, reject reason", f"/tasks?reject={reason}"),
        ("list", "tasks, question search", "/tasks?q=weather+report"),
        ("list", "task (its trajectories, samples)", f"/tasks/{task}"),
        ("list", "compare", "/compare"),
        ("list", "sql (count by difficulty)", "/sql?q=SELECT+difficulty,+count(*)+FROM+tasks+GROUP+BY+1"),
        ("traj", "trajectory", f"/trajectories/{plain}"),
        ("traj", "trajectory with token trace", f"/trajectories/{traced}"),
    ]
    with TestClient(create_app(RunDB(run), "bench"), base_url="http://127.0.0.1") as client:
        t0 = time.perf_counter()
        client.get(f"/tasks/{task}")  # builds the views and the in-memory copies of light columns
        cold = time.perf_counter() - t0
        results = [(kind, name, *server_ms(client, url, args.repeat)) for kind, name, url in pages]
    tokens = one(f"SELECT len(token_ids) FROM trajectories WHERE traj_id = '{traced}'")
    print(
        f"trajectories: {store.count('trajectories'):,}   tasks: {store.count('tasks'):,}   traced: {tokens:,} tokens"
    )
    print(
        f"open (launch to first page): {opened:.2f} s   goal < {OPEN_GOAL_S} s: {'met' if opened < OPEN_GOAL_S else 'NOT met'}"
    )
    print(f"first page of a fresh app (views and in-memory copies built): {cold:.2f} s")
    print(f"{'page':<36} {'first ms':>9} {'median ms':>10} {'worst ms':>9} {'goal':>6} {'worst cpu ms':>13}")
    ok = opened < OPEN_GOAL_S
    for kind, name, first, med, worst, cpu in results:
        goal = LIST_GOAL_MS if kind == "list" else TRAJ_GOAL_MS
        ok &= worst < goal
        verdict = "" if worst < goal else "  NOT met"
        print(f"{name:<36} {first:>9.1f} {med:>10.1f} {worst:>9.1f} {'<' + str(goal):>6} {cpu:>13.1f}{verdict}")
    print(f"goals: {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
