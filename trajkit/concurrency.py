"""Bounded concurrency for every stage that fans out: keep work in flight, hand back results as they finish.

Results come back to the one coroutine that iterates, so writing rows needs no
locks. An exception from a work item (a bug, or ``StageStopped`` at a budget
cap) cancels the rest and propagates; faults that are data (a bad model output,
a dead server) are handled inside the work function. Iterate inside
``contextlib.aclosing(bounded(...))`` so that an error in the loop's body
cancels the work in flight at once; ``StageContext.fan_out`` does that, with
progress and periodic flushes, for the stages. A stage's ``Share`` (its CPUs) is
handed down from its context to the pools that size themselves from it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def machine_cpus() -> int:
    """Every CPU this process may run on."""
    return len(os.sched_getaffinity(0))


@dataclass(frozen=True)
class Share:
    """The part of the machine a stage's shard works with, handed from its context (``StageContext.share``)
    to what sizes itself. ``cpus``: what an executor gave the shard (a Ray task's CPUs), by default every
    CPU the process may run on; sandbox and server pools size themselves from it, so shards sharing a node
    do not each take the whole node."""

    cpus: int = field(default_factory=machine_cpus)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cpus", max(1, self.cpus))


async def bounded(items: Iterable[T], fn: Callable[[T], Awaitable[R]], concurrency: int) -> AsyncIterator[tuple[T, R]]:
    """Run ``fn`` over ``items`` with at most ``concurrency`` in flight; yield (item, result) as each finishes
    (those finishing together in the order they started). ``items`` is read lazily, one item per free slot."""
    pending = iter(items)
    running: dict[asyncio.Task[R], tuple[int, T]] = {}
    started = 0

    def launch() -> None:
        nonlocal started
        while len(running) < max(1, concurrency):
            item = next(pending, _END)
            if item is _END:
                return
            running[asyncio.ensure_future(fn(item))] = (started, item)
            started += 1

    launch()
    try:
        while running:
            finished, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(finished, key=lambda t: running[t][0]):
                _, item = running.pop(task)
                yield item, task.result()
            launch()
    finally:
        await cancel_all(running)


async def cancel_all(tasks: Iterable[asyncio.Task]) -> None:
    """Cancel tasks and wait until they are gone (their cleanup, such as killing servers, runs)."""
    tasks = list(tasks)
    for t in tasks:
        t.cancel()
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)


_END = object()
