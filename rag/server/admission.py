"""Backpressure: a bounded number of questions at work, a bounded queue before them, 429 beyond.

A question waits here (counted in ``num_requests_waiting``) before it retrieves or generates
anything, so overload costs no model work; the one that would make the queue longer than
``max_waiting`` is refused at once with ``OverloadedError`` (429) and a ``Retry-After`` estimated
from recent service times.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from rag.errors import OverloadedError
from rag.server.telemetry import LoadCounts


class Admission:
    """``async with admission.slot() as waited_s:`` holds one of ``max_running`` slots."""

    def __init__(self, max_running: int, max_waiting: int, load: LoadCounts | None = None):
        self.max_running = max_running
        self.max_waiting = max_waiting
        self.load = load or LoadCounts()
        self._free = asyncio.Semaphore(max_running)
        self._mean_service_s = 5.0
        """Moving average of how long a slot is held (seeds the first Retry-After)."""
        self._drained = asyncio.Event()
        self._drained.set()

    def retry_after_s(self) -> int:
        """Seconds until the queue ahead has likely moved on by one place."""
        ahead = self.load.waiting + 1
        return max(1, math.ceil(self._mean_service_s * ahead / self.max_running))

    def check(self) -> None:
        """Raise ``OverloadedError`` if a question arriving now would be refused."""
        if self._free.locked() and self.load.waiting >= self.max_waiting:
            raise OverloadedError(
                f"the server is at capacity ({self.load.running} questions at work, "
                f"{self.load.waiting} waiting); retry later",
                retry_after_s=self.retry_after_s(),
            )

    @asynccontextmanager
    async def slot(self, *, checked: bool = False) -> AsyncIterator[float]:
        """Wait for a slot (refused at once when the queue is full, unless the caller has
        ``checked`` already: a stream admitted when its response started is not refused later);
        yields the seconds waited."""
        if not checked:
            self.check()
        arrived = time.perf_counter()
        self.load.waiting += 1
        try:
            await self._free.acquire()
        finally:
            self.load.waiting -= 1
        started = time.perf_counter()
        self.load.running += 1
        self._drained.clear()
        try:
            yield started - arrived
        finally:
            self.load.running -= 1
            self._free.release()
            held = time.perf_counter() - started
            self._mean_service_s = 0.8 * self._mean_service_s + 0.2 * held
            if self.load.running == 0:
                self._drained.set()

    async def drain(self, grace_s: float) -> bool:
        """Wait up to ``grace_s`` for the questions at work to finish; whether they did."""
        try:
            await asyncio.wait_for(self._drained.wait(), grace_s)
        except TimeoutError:
            return False
        return True
