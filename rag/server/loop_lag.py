"""Event-loop lag: how late a task that asked to sleep a fixed time is woken.

A slow ``/healthz`` under load is either the event loop being blocked (a coroutine doing CPU work
without yielding) or the process not getting the CPU at all; both show here as lag, and together
with CPU usage the histogram tells them apart over time, where one probe's latency cannot.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

INTERVAL_S = 0.1
"""How long the monitor sleeps between two observations."""


async def watch_loop_lag(
    observe: Callable[[float], None],
    interval_s: float = INTERVAL_S,
    clock: Callable[[], float] = time.perf_counter,
) -> None:
    """Sleep ``interval_s`` again and again, passing to ``observe`` how many seconds late each
    wake-up was; runs until cancelled."""
    while True:
        asleep = clock()
        await asyncio.sleep(interval_s)
        observe(max(0.0, clock() - asleep - interval_s))


def start_loop_lag_monitor(observe: Callable[[float], None]) -> asyncio.Task[None]:
    """The monitor as a task on the running loop; the caller cancels it on shutdown."""
    return asyncio.create_task(watch_loop_lag(observe), name="ragguard-loop-lag")
