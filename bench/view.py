"""Viewer benchmark: `trajkit view` on a synthetic run of 1,000,000 trajectories with every table populated.

Reports the time to open (the real command, from launch to its first page), the first
page of a fresh app (it builds the views and the in-memory copies of light columns that
pages look rows up in), and each page's server time (the app's Server-Timing header:
its first request, then median and worst of --repeat more, through Starlette's
in-process client), and the median and worst CPU time of the process over those requests
(less sensitive than wall time to other work on a shared machine; a decision's includes none of the
reading ahead the flow does between two decisions, ``PAUSE_S`` apart). The pages the viewer had
before the review work (run, tasks, task, compare, sql, trajectory) are measured in the
same run as the new ones (the trajectory list with its counts, the review flow's next
row, a decision in the flow, the diff, the table browser), so they compare as ratios.
Then a bulk decision on about 100,000 rows (one POST) and its undo, timed whole.

Goals: open < 2 s; a list page's median < 300 ms and worst < 600 ms; a trajectory page's
(and the flow's next row's, and a decision's) median < 100 ms and worst < 200 ms; the bulk
decision and its undo < 10 s each.

    python bench/view.py [--rows 1000000] [--repeat 20] [--run DIR]

The run is built once into bench/out/view-<rows> (or --run) and reused; the reviews the
bench writes are removed at its end.
"""

from __future__ import annotations

import argparse
import re
import shutil
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

LIST_GOAL_MS, TRAJ_GOAL_MS, OPEN_GOAL_S, BULK_GOAL_S = 300, 100, 2.0, 10.0
THREE = "status=completed&verdict=pass&model=Qwen/Qwen3-8B"  # the list's three filters combined
PAUSE_S = 0.5  # between two decisions in the flow: less than any reviewer takes to read a row


def forget_reviews(run: Path) -> None:
    """Remove the reviews the bench wrote: their shards and the reviews stage's ledgers that list them."""
    shutil.rmtree(run / "reviews", ignore_errors=True)
    shutil.rmtree(run / "_stages" / "reviews", ignore_errors=True)


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


def server_ms(client, url: str, repeat: int) -> tuple[float, float, float, float, float]:
    """The first request's server time, then the median and worst of ``repeat`` more, and the median and
    worst CPU time of this process over those ``repeat``."""
    times, cpu = [], []
    for _ in range(repeat + 1):
        c0 = time.process_time()
        r = client.get(url)
        cpu.append((time.process_time() - c0) * 1000)
        assert r.status_code == 200, (url, r.status_code, r.text[:300])
        times.append(float(r.headers["server-timing"].split("dur=")[1]))
    return times[0], statistics.median(times[1:]), max(times[1:]), statistics.median(cpu[1:]), max(cpu[1:])


def post_ms(client, url: str, form: dict, repeat: int, vary) -> tuple[float, float, float, float, float]:
    """As ``server_ms`` for a form posted ``repeat`` + 1 times, as the viewer's own page posts it, ``PAUSE_S``
    apart (a reviewer reads each row before deciding: the row after it is read meanwhile); ``vary(i)``
    gives the fields of the i-th post."""
    times, cpu = [], []
    for i in range(repeat + 1):
        time.sleep(PAUSE_S)
        c0 = time.process_time()
        r = client.post(url, data={**form, **vary(i)}, headers={"origin": str(client.base_url)})
        cpu.append((time.process_time() - c0) * 1000)
        assert r.status_code == 200, (url, r.status_code, r.text[:300])
        times.append(float(r.headers["server-timing"].split("dur=")[1]))
    return times[0], statistics.median(times[1:]), max(times[1:]), statistics.median(cpu[1:]), max(cpu[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=20)
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
    extended = one("SELECT parent_id FROM trajectories WHERE parent_id IS NOT NULL LIMIT 1")
    sibling = one(
        f"SELECT traj_id FROM trajectories WHERE task_id = (SELECT task_id FROM trajectories WHERE traj_id = '{extended}') AND traj_id != '{extended}' LIMIT 1"
    )
    forget_reviews(run)  # a run the bench reviewed before, were it stopped midway
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
        ("new", "", ""),
        ("list", "trajectories", "/trajectories"),
        ("list", "trajectories, 3 filters, counts", f"/trajectories?{THREE}"),
        ("list", "trajectories, 3 filters, by seconds", f"/trajectories?{THREE}&sort=seconds&dir=desc"),
        ("list", "trajectories, unreviewed, a tool", "/trajectories?review=none&tool=get_weather&reason_code=none"),
        ("list", "trajectories, page 1000", "/trajectories?page=1000"),
        ("list", "review flow (first page)", f"/flow?{THREE}"),
        ("traj", "trajectory with extensions", f"/trajectories/{extended}"),
        ("traj", "flow: next row (fragment)", f"/flow/row?{THREE}&go=next&at={plain}"),
        ("traj", "flow: skip to unreviewed", f"/flow/row?{THREE}&go=todo&at={plain}"),
        ("list", "diff of two trajectories", f"/diff?a={extended}&b={sibling}"),
        ("list", "table browser (tasks)", "/tables/tasks"),
    ]
    with TestClient(create_app(RunDB(run), "bench"), base_url="http://127.0.0.1") as client:
        t0 = time.perf_counter()
        client.get(f"/tasks/{task}")  # builds the views and the in-memory copies of light columns
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        client.get("/trajectories")  # builds the list's in-memory copy (the trajectory page's too)
        cold_list = time.perf_counter() - t0
        results = [(kind, name, *server_ms(client, url, args.repeat)) if url else (kind,) for kind, name, url in pages]
        csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/sql").text).group(1)
        flow = client.get(f"/flow?{THREE}").text
        ids = [re.search(r'data-traj="(\w+)"', flow).group(1)]

        def next_row(i: int) -> dict:  # each decision is on the row the previous one answered with
            return {"traj_id": ids[-1], "action": ("accept", "reject")[i % 2]}

        decide = f"/flow/decide?{THREE}"
        form = {"csrf": csrf, "fragment": "1"}
        orig_post = client.post

        def posting(url, **kw):
            r = orig_post(url, **kw)
            ids.append(re.search(r'data-traj="(\w+)"', r.text).group(1))
            return r

        client.post = posting
        results.append(
            ("traj", "flow: a decision, then the next row", *post_ms(client, decide, form, args.repeat, next_row))
        )
        client.post = orig_post
        bulk = "status=truncated"
        n = int(re.search(r'name="expected" value="(\d+)"', client.get(f"/bulk?{bulk}&action=reject").text).group(1))
        t0 = time.perf_counter()
        r = client.post(f"/bulk?{bulk}", data={"csrf": csrf, "action": "reject", "expected": n},
                        headers={"origin": str(client.base_url)}, follow_redirects=False)  # fmt: skip
        bulk_s = time.perf_counter() - t0
        assert r.status_code == 303, r.text[:300]
        batch = re.search(r"batch=(\w+)", r.headers["location"]).group(1)
        t0 = time.perf_counter()
        r = client.post("/bulk/undo", data={"csrf": csrf, "batch": batch}, headers={"origin": str(client.base_url)},
                        follow_redirects=False)  # fmt: skip
        undo_s = time.perf_counter() - t0
        assert r.status_code == 303, r.text[:300]
        after = [("list", "trajectories, 3 filters, counts (after the bulk)", f"/trajectories?{THREE}")]
        results += [(kind, name, *server_ms(client, url, args.repeat)) for kind, name, url in after]
    reviews = len(store.rows("reviews"))
    forget_reviews(run)
    tokens = one(f"SELECT len(token_ids) FROM trajectories WHERE traj_id = '{traced}'")
    print(
        f"trajectories: {store.count('trajectories'):,}   tasks: {store.count('tasks'):,}   traced: {tokens:,} tokens"
    )
    print(
        f"open (launch to first page): {opened:.2f} s   goal < {OPEN_GOAL_S} s: {'met' if opened < OPEN_GOAL_S else 'NOT met'}"
    )
    print(
        f"first page of a fresh app (views and in-memory copies built): {cold:.2f} s; then the list: {cold_list:.2f} s"
    )
    print(f"{'page':<50} {'first ms':>9} {'median ms':>10} {'worst ms':>9} {'goal':>6} {'cpu ms median / worst':>22}")
    ok = opened < OPEN_GOAL_S
    for kind, *rest in results:
        if kind == "new":
            print("-- new pages (issue 36) --")
            continue
        name, first, med, worst, cpu_med, cpu = rest
        goal = LIST_GOAL_MS if kind == "list" else TRAJ_GOAL_MS
        met = med < goal and worst < 2 * goal
        ok &= met
        verdict = "" if met else "  NOT met"
        print(
            f"{name:<50} {first:>9.1f} {med:>10.1f} {worst:>9.1f} {'<' + str(goal):>6} {cpu_med:>12.1f} / {cpu:>7.1f}{verdict}"
        )
    print(
        f"bulk decision on {n:,} rows (one POST): {bulk_s:.2f} s; its undo: {undo_s:.2f} s; goal < {BULK_GOAL_S:.0f} s"
    )
    ok &= bulk_s < BULK_GOAL_S and undo_s < BULK_GOAL_S
    print(f"reviews written by the bench (removed): {reviews:,}")
    print(f"goals (median < goal, worst < 2 x goal): {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
