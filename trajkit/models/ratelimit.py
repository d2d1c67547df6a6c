"""Requests- and tokens-per-minute limits for remote endpoints: token buckets on the event loop."""

from __future__ import annotations

import asyncio
import time


class RateLimiter:
    """A token bucket refilled at ``per_minute / 60`` per second, holding one second's worth.

    A small bucket paces calls evenly instead of spending a minute's budget in
    a burst (providers quantize their limits per second too). An amount larger
    than the bucket waits for a full bucket and leaves it in debt, so large
    requests still pass at the configured rate. Waiters are served in order.
    """

    def __init__(self, per_minute: float):
        if per_minute <= 0:
            raise ValueError("a rate limit must be positive")
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, self.rate)
        self.level = self.capacity
        self.updated = time.monotonic()
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _refill(self) -> None:
        now = time.monotonic()
        self.level = min(self.capacity, self.level + (now - self.updated) * self.rate)
        self.updated = now

    async def acquire(self, amount: float = 1.0) -> None:
        """Wait until ``amount`` may be spent, then spend it."""
        loop = asyncio.get_running_loop()
        if self._lock is None or self._loop is not loop:
            self._lock, self._loop = asyncio.Lock(), loop
        async with self._lock:
            need = min(amount, self.capacity)
            while True:
                self._refill()
                if self.level >= need:
                    self.level -= amount
                    return
                await asyncio.sleep((need - self.level) / self.rate)

    def adjust(self, amount: float) -> None:
        """Correct an earlier estimate: a positive amount is given back, a negative one charged."""
        self._refill()
        self.level = min(self.capacity, self.level + amount)
