"""Backpressure: a bounded number of questions at work, a bounded queue before them, 429 beyond.

A question waits here (counted in ``num_requests_waiting``) before it retrieves or generates
anything, so overload costs no model work. It is refused at once with ``OverloadedError`` (429)
and a ``Retry-After`` estimated from recent service times when it would make the queue longer
than ``max_waiting``, or when its predicted wait for a slot is longer than ``max_queue_wait_s``
or than ``max_queue_wait_services`` times the service time of a question at low load. The second
bound follows the hardware rather than a number of seconds: with 1, a question is admitted only if
it is predicted to wait about one answer's time at most, however many arrive.

How many questions are at work at once is a limit that may adapt (``adaptive=True``): past the
point where the hardware is saturated (on a small CPU, two to four questions) each extra question
only makes all of them slower, so ``GradientLimit`` keeps the limit where service times stay close
to those measured at low concurrency. Waiters are woken first come, first served; a limit that
falls takes effect as the questions at work finish.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass

from rag.errors import OverloadedError
from rag.server.disconnect import ClientDisconnected
from rag.server.telemetry import LoadCounts

_ABANDONED = (asyncio.CancelledError, GeneratorExit, ClientDisconnected)
"""Ways a slot ends early because its client left: its hold time says nothing about the load."""


class GradientLimit:
    """The number of questions at work at once, moved by measured service times.

    The baseline is the service time at low concurrency (at most ``base_concurrency`` questions
    held a slot during the whole service), an EWMA re-measured whenever the server is lightly
    loaded and, under sustained load, by a short probe that caps the limit at ``base_concurrency``
    until ``PROBE_SAMPLES`` such services have completed. ``recent`` is an EWMA of all services.
    After each service: while ``recent <= TOLERANCE * baseline`` and the limit was reached, the
    limit grows by one per ``limit`` such services (one step per round of slots); when ``recent``
    exceeds it, the limit is multiplied by ``BACKOFF`` (never below 1), then held for one round so
    that questions admitted before the cut do not cut it again.

    Why an EWMA at low concurrency and not a minimum: service times differ by answer length (an
    abstention skips the model), and the minimum of such a mix is its shortest kind, against which
    the mean of the mix always looks slow. Comparing the mean at low concurrency with the recent
    mean is robust to the mix as long as the mix is stable; a mix that turns towards long answers
    for a while still reads as load until the next low-concurrency services re-measure it.
    """

    ALPHA = 0.2
    """EWMA weight of one service in ``recent`` and in the baseline (about the last 5-10)."""
    TOLERANCE = 1.5
    """Recent service time, relative to the baseline, up to which the limit may grow."""
    BACKOFF = 0.75
    """Factor applied to the limit when services are slower than tolerated."""
    PROBE_EVERY = 100
    """Services without a low-concurrency one after which the baseline is re-measured."""
    PROBE_SAMPLES = 3
    """Low-concurrency services a probe waits for (their mean is the new baseline)."""

    def __init__(self, max_limit: int, initial: int = 2):
        self.max_limit = max_limit
        self.base_concurrency = max(1, min(initial, max_limit))
        self.limit = self.base_concurrency
        self.recent: float | None = None
        self.baseline: float | None = None
        self._credit = 0
        """Limit-bound services within tolerance since the last growth."""
        self._hold = 0
        """Services to ignore for another cut after one."""
        self._since_base = 0
        self._probe: list[float] | None = None
        """Low-concurrency service times of the probe under way, if one is."""
        self._probe_saved = 0
        """The limit to return to after the probe."""

    @property
    def probing(self) -> bool:
        return self._probe is not None

    def record(self, service_s: float, peak: int) -> None:
        """One completed service: ``service_s`` held, with at most ``peak`` slots held at once."""
        self.recent = service_s if self.recent is None else _ewma(self.recent, service_s)
        if peak <= self.base_concurrency:
            self._record_base(service_s)
        else:
            self._since_base += 1
        if self._probe is not None or self.baseline is None:
            return
        if self._since_base >= self.PROBE_EVERY:
            self._start_probe()
        elif self.recent > self.TOLERANCE * self.baseline:
            self._cut()
        elif peak >= self.limit:
            self._grow()

    def _record_base(self, service_s: float) -> None:
        self._since_base = 0
        if self._probe is None:
            base = self.baseline
            self.baseline = service_s if base is None else _ewma(base, service_s)
            return
        self._probe.append(service_s)
        if len(self._probe) >= self.PROBE_SAMPLES:
            self.baseline = sum(self._probe) / len(self._probe)
            self.limit, self._probe = self._probe_saved, None

    def _start_probe(self) -> None:
        self._probe, self._probe_saved = [], self.limit
        self.limit = self.base_concurrency
        self._credit = 0

    def _cut(self) -> None:
        self._credit = 0
        if self._hold > 0:
            self._hold -= 1
            return
        self._hold = self.limit
        self.limit = max(1, math.floor(self.limit * self.BACKOFF))

    def _grow(self) -> None:
        self._hold = max(0, self._hold - 1)
        self._credit += 1
        if self._credit >= self.limit:
            self._credit = 0
            self.limit = min(self.max_limit, self.limit + 1)


def _ewma(mean: float, sample: float) -> float:
    return mean + GradientLimit.ALPHA * (sample - mean)


@dataclass(slots=True, eq=False)
class _Held:
    """One slot held: the most slots held at once while it was, for the limit's statistics."""

    peak: int


class Admission:
    """``async with admission.slot() as waited_s:`` holds one of ``limit`` slots.

    Built as ``Admission(max_running, max_waiting, load)`` it behaves as a fixed pool of
    ``max_running`` slots with a queue of ``max_waiting``; ``adaptive`` lets the limit move
    between 1 and ``max_running``; ``max_queue_wait_s`` and ``max_queue_wait_services`` (a
    multiple of the service time at low load) refuse a question predicted to wait longer.
    """

    def __init__(
        self,
        max_running: int,
        max_waiting: int,
        load: LoadCounts | None = None,
        *,
        adaptive: bool = False,
        max_queue_wait_s: float | None = None,
        max_queue_wait_services: float | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.max_running = max_running
        self.max_waiting = max_waiting
        self.max_queue_wait_s = max_queue_wait_s
        self.max_queue_wait_services = max_queue_wait_services
        self.load = load or LoadCounts()
        self.limiter = GradientLimit(max_running) if adaptive else None
        self._clock = clock
        self._running = 0
        self._waiting = 0
        self._held: set[_Held] = set()
        self._waiters: deque[asyncio.Future[_Held]] = deque()
        self._mean_service_s = 5.0
        """Moving average of how long a slot is held (seeds the first Retry-After)."""
        self._drained = asyncio.Event()
        self._drained.set()
        self.load.limit = self.limit

    @property
    def limit(self) -> int:
        """Slots that may be held at once now."""
        return self.limiter.limit if self.limiter is not None else self.max_running

    @property
    def mean_service_s(self) -> float:
        """Moving average of the time a slot is held (5 s until one was)."""
        return self._mean_service_s

    @property
    def base_service_s(self) -> float:
        """Service time of a question at low load: the adaptive limit's baseline once measured,
        else the moving average of all services."""
        base = self.limiter.baseline if self.limiter is not None else None
        return base if base is not None else self._mean_service_s

    def wait_bound_s(self) -> float | None:
        """The longest predicted wait a question is admitted with now (None: no bound)."""
        bounds = [] if self.max_queue_wait_s is None else [self.max_queue_wait_s]
        if self.max_queue_wait_services is not None:
            bounds.append(self.max_queue_wait_services * self.base_service_s)
        return min(bounds) if bounds else None

    def predicted_wait_s(self) -> float:
        """How long a question arriving now would likely wait for a slot (0: one is free)."""
        if not self._must_wait():
            return 0.0
        return (self._waiting + 1) * self._mean_service_s / self.limit

    def retry_after_s(self) -> int:
        """Seconds until the queue ahead has likely moved on by one place."""
        ahead = self._waiting + 1
        return max(1, math.ceil(self._mean_service_s * ahead / self.limit))

    def check(self) -> None:
        """Raise ``OverloadedError`` if a question arriving now would be refused."""
        if not self._must_wait():
            return
        bound = self.wait_bound_s()
        if self._waiting >= self.max_waiting:
            why = f"{self._waiting} waiting"
        elif bound is not None and self.predicted_wait_s() > bound:
            why = f"a predicted wait of {self.predicted_wait_s():.0f} s for a slot"
        else:
            return
        raise OverloadedError(
            f"the server is at capacity ({self._running} questions at work, {why}); retry later",
            retry_after_s=self.retry_after_s(),
        )

    def record_service(self, seconds: float, *, peak: int | None = None) -> None:
        """Account one completed service of ``seconds`` (``peak``: most slots held at once while
        it ran, by default the limit, i.e. a service the limit bound). Called as each slot is
        released; exposed so that the statistics can be driven without waiting."""
        self._mean_service_s = 0.8 * self._mean_service_s + 0.2 * seconds
        if self.limiter is None:
            return
        self.limiter.record(seconds, self.limit if peak is None else peak)
        self.load.limit = self.limit
        self._wake()  # a limit that grew lets waiters in

    @asynccontextmanager
    async def slot(self, *, checked: bool = False) -> AsyncIterator[float]:
        """Wait for a slot (refused at once when the queue is full, unless the caller has
        ``checked`` already: a stream admitted when its response started is not refused later);
        yields the seconds waited."""
        if not checked:
            self.check()
        arrived = self._clock()
        held = await self._acquire()
        started = self._clock()
        completed = False
        try:
            yield started - arrived
            completed = True
        except _ABANDONED:
            raise
        except Exception:
            completed = True  # failed (e.g. its deadline passed): still a measure of the load
            raise
        finally:
            self._release(held)
            if completed:
                self.record_service(self._clock() - started, peak=held.peak)

    async def drain(self, grace_s: float) -> bool:
        """Wait up to ``grace_s`` for the questions at work to finish; whether they did."""
        try:
            await asyncio.wait_for(self._drained.wait(), grace_s)
        except TimeoutError:
            return False
        return True

    def _must_wait(self) -> bool:
        return self._running >= self.limit or self._waiting > 0

    async def _acquire(self) -> _Held:
        """A slot now if one is free and nobody waits; else wait in line for one. The slot is
        handed over by ``_wake`` (counted as running before the waiter resumes), so a waiter
        cancelled after the hand-over gives it back."""
        if not self._must_wait():
            return self._take()
        waiter: asyncio.Future[_Held] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._set_waiting(+1)
        try:
            return await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._release(waiter.result())  # handed over, then cancelled: give it back
            else:
                waiter.cancel()
                with suppress(ValueError):  # _wake may have dropped it already
                    self._waiters.remove(waiter)
                self._set_waiting(-1)
                self._wake()  # a newcomer may have queued behind it while a slot was free
            raise

    def _wake(self) -> None:
        """Hand free slots to the waiters, first come first served."""
        while self._waiters and self._running < self.limit:
            waiter = self._waiters.popleft()
            if waiter.done():  # cancelled; its task has yet to run and leave the line
                continue
            self._set_waiting(-1)
            waiter.set_result(self._take())

    def _take(self) -> _Held:
        self._running += 1
        self.load.running += 1
        self._drained.clear()
        for other in self._held:
            other.peak = max(other.peak, self._running)
        held = _Held(peak=self._running)
        self._held.add(held)
        return held

    def _release(self, held: _Held) -> None:
        self._held.discard(held)
        self._running -= 1
        self.load.running -= 1
        self._wake()
        if self._running == 0:
            self._drained.set()

    def _set_waiting(self, change: int) -> None:
        self._waiting += change
        self.load.waiting += change
