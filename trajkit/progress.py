"""How a stage shows its progress: a bar on a terminal, a plain line every ``PLAIN_PROGRESS_S`` in a log, and,
for a shard on a cluster, a small file its driver reads to show every shard's progress as one.

Each yields ``show(done, total)``; ``total`` may be None (not known yet).
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from trajkit.store import atomic_write_json

PLAIN_PROGRESS_S = 10.0
SHARD_PROGRESS_S = 1.0  # how often a shard on a cluster writes its progress file, and its driver reads them

Show = Callable[[int, "int | None"], None]


@functools.cache
def console():
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)  # a log line stays one line, whatever the width


@contextlib.contextmanager
def display(label: str) -> Iterator[Show]:
    """A rich progress bar with counts and, at the end, the rate; plain lines when stderr is not a terminal."""
    if not console().is_terminal:
        with _every(PLAIN_PROGRESS_S, lambda done, total, seconds: _line(label, done, total, seconds)) as show:
            yield show
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = [TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=console(), transient=False) as bar:
        task = bar.add_task(label, total=None)
        start = time.monotonic()
        yield lambda done, total: bar.update(task, completed=done, total=total)
        done = bar.tasks[0].completed
        bar.update(task, description=f"{done / max(time.monotonic() - start, 1e-9):.1f}/s")


def _line(label: str, done: int, total: int | None, seconds: float) -> None:
    of = "" if total is None else f" of {total}"
    print(f"{label}: {done}{of} in {seconds:.0f}s", file=sys.stderr, flush=True)


@contextlib.contextmanager
def to_file(path: Path, unit: str) -> Iterator[Show]:
    """A shard's progress in ``path`` (``{"unit", "done", "total"}``), rewritten every ``SHARD_PROGRESS_S``."""

    def write(done: int, total: int | None, seconds: float) -> None:
        atomic_write_json(path, {"unit": unit, "done": done, "total": total})

    with _every(SHARD_PROGRESS_S, write) as show:
        yield show


def read_shards(folder: Path, world_size: int) -> tuple[int, int | None]:
    """Items done over the progress files of a stage's shards in ``folder``, and their total (None until every
    shard has written one)."""
    done, totals = 0, []
    for path in folder.glob("_progress-r*.json"):
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):  # replaced while read
            continue
        done += state["done"]
        totals.append(state["total"])
    known = len(totals) == world_size and None not in totals
    return done, sum(totals) if known else None


def shard_file(folder: Path, rank: int) -> Path:
    return folder / f"_progress-r{rank}.json"


@contextlib.contextmanager
def _every(period: float, report: Callable[[int, int | None, float], None]) -> Iterator[Show]:
    """``show`` keeps the latest state; ``report(done, total, seconds)`` runs every ``period`` and at the end."""
    state, start, stop = [0, None], time.monotonic(), threading.Event()

    def tick() -> None:
        while not stop.wait(period):
            report(*state, time.monotonic() - start)

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield lambda done, total: state.__setitem__(slice(None), [done, total])
    finally:
        stop.set()
        thread.join()
        report(*state, time.monotonic() - start)
