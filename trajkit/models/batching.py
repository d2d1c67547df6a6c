"""Gathering concurrent requests into batches for a model that runs in a worker thread.

Callers on the event loop ``await batcher.submit(item)``; a batcher task
collects what is queued (after letting every coroutine that is ready run, so
an ``asyncio.gather`` of calls lands in one batch), runs ``run(items)`` in
the worker thread (the event loop stays free), and resolves each caller's
future. Items that arrive while a batch runs form the next one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any


class Batcher:
    """Batches items for ``run`` (a list in, a list of results in the same order out)."""

    def __init__(self, run: Callable[[list[Any]], list[Any]], executor: Executor, max_batch: int | None = None):
        self.run, self.executor, self.max_batch = run, executor, max_batch
        self.batches: list[int] = []  # the size of every batch run, for tests and benchmarks
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: list[tuple[Any, asyncio.Future]] = []
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    def submit(self, item: Any) -> asyncio.Future:
        """A future for ``item``'s result."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._task is None or self._task.done():
            self._loop, self._queue, self._wakeup = loop, [], asyncio.Event()
            self._task = loop.create_task(self._serve())
        future = loop.create_future()
        self._queue.append((item, future))
        self._wakeup.set()
        return future

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            size = -1
            while size != len(self._queue):
                size = len(self._queue)
                await asyncio.sleep(0)
            while self._queue:
                cut = self.max_batch or len(self._queue)
                take = [(item, f) for item, f in self._queue[:cut] if not f.done()]
                del self._queue[:cut]
                if not take:
                    continue
                self.batches.append(len(take))
                try:
                    results = await loop.run_in_executor(self.executor, self.run, [item for item, _ in take])
                except Exception as e:  # noqa: BLE001 - each caller gets the failure
                    for _, f in take:
                        if not f.done():
                            f.set_exception(e)
                    continue
                for (_, f), result in zip(take, results):
                    if not f.done():
                        f.set_result(result)

    def close(self) -> None:
        """Stop the batcher task (call from its event loop)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
