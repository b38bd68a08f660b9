"""Thread priorities: the model's threads step aside for the thread that answers the network."""

from __future__ import annotations

import os
import threading
import time

import pytest

from engine.async_engine import AsyncEngine
from engine.threads import lower_thread_priority

pytestmark = pytest.mark.skipif(not hasattr(os, "setpriority"), reason="no per-thread nice")


def nice_of(native_id: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, native_id)


def run_in_thread(increments: list[int]) -> tuple[int, int, list[bool]]:
    """The thread's nice before and after calling ``lower_thread_priority`` with each increment."""
    seen: list[int] = []
    done: list[bool] = []

    def body() -> None:
        tid = threading.get_native_id()
        seen.append(nice_of(tid))
        done.extend(lower_thread_priority(n) for n in increments)
        seen.append(nice_of(tid))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    return seen[0], seen[1], done


def test_only_the_calling_thread_is_lowered_and_only_once() -> None:
    mine = nice_of(threading.get_native_id())
    before, after, done = run_in_thread([3, 3])
    assert after == min(19, before + 3)
    assert done == [True, False]  # the second call changes nothing
    assert nice_of(threading.get_native_id()) == mine


def test_an_increment_of_zero_changes_nothing() -> None:
    before, after, done = run_in_thread([0])
    assert (after, done) == (before, [False])


def test_the_engine_thread_runs_at_the_configured_priority(llm_engine) -> None:  # type: ignore[no-untyped-def]
    mine = nice_of(threading.get_native_id())
    saved = llm_engine.config.thread_nice
    llm_engine.config.thread_nice = 4
    engine = AsyncEngine(llm_engine)
    try:
        tid = engine._thread.native_id
        assert tid is not None
        deadline = time.monotonic() + 30
        while nice_of(tid) != min(19, mine + 4):  # the thread lowers itself as it starts
            assert time.monotonic() < deadline, "the engine thread kept its priority"
            time.sleep(0.01)
    finally:
        engine.shutdown()
        llm_engine.config.thread_nice = saved
    assert nice_of(threading.get_native_id()) == mine
