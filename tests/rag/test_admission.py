"""Admission without a model: the adaptive limit, FIFO waiters, wait-time refusal, wiring.

Service times are fed through ``record_service`` and slots are taken and released in a known
order on one event loop, so nothing here depends on how fast the machine is.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from rag.errors import OverloadedError
from rag.server.admission import Admission, GradientLimit
from rag.server.loop_lag import watch_loop_lag
from rag.server.state import ServerState
from rag.server.telemetry import LoadCounts, Telemetry
from rag.settings import Settings


def settings(tmp_path: Path, **values: Any) -> Settings:
    return Settings(
        index_dir=tmp_path / "indexes", data_dir=tmp_path / "data", _env_file=None, **values
    )


# ------------------------------------------------------------------ the adaptive limit


def test_the_limit_starts_small_grows_at_baseline_and_shrinks_when_slower() -> None:
    admission = Admission(16, 16, adaptive=True)
    assert admission.limit == 2 and admission.load.limit == 2
    for _ in range(20):  # services as fast as at low concurrency, each one bound by the limit
        admission.record_service(1.0)
    grown = admission.limit
    assert 4 < grown <= 16 and admission.load.limit == grown
    limits = []
    for _ in range(12):  # ten times slower: cut, held a round, cut again
        admission.record_service(10.0)
        limits.append(admission.limit)
    assert limits[0] == math.floor(grown * GradientLimit.BACKOFF)
    assert min(limits) < limits[0] and all(b <= a for a, b in itertools.pairwise(limits))
    assert admission.load.limit == admission.limit >= 1


def test_the_limit_does_not_grow_when_it_was_not_reached() -> None:
    admission = Admission(16, 16, adaptive=True)
    for _ in range(50):
        admission.record_service(1.0, peak=1)  # never more than one question at once
    assert admission.limit == 2


def test_the_limit_never_falls_below_one_nor_grows_past_the_maximum() -> None:
    limit = GradientLimit(3)
    for _ in range(30):
        limit.record(1.0, peak=limit.limit)
    assert limit.limit == 3
    limit.baseline = 0.01  # everything now looks far slower than the baseline
    for _ in range(30):
        limit.record(5.0, peak=3)
    assert limit.limit == 1


def test_a_busy_server_re_measures_its_baseline_with_a_short_probe() -> None:
    limit = GradientLimit(16)
    limit.record(1.0, peak=2)
    limit.limit = 8
    for _ in range(GradientLimit.PROBE_EVERY - 1):  # always busy: no low-concurrency service
        limit.record(1.2, peak=8)
    before = limit.limit
    assert not limit.probing and before >= 8
    limit.record(1.2, peak=8)
    assert limit.probing and limit.limit == limit.base_concurrency == 2
    limit.record(1.2, peak=8)  # admitted before the probe: not a baseline sample
    assert limit.probing
    for seconds in (2.0, 3.0, 4.0):
        limit.record(seconds, peak=2)
    assert not limit.probing and limit.baseline == pytest.approx(3.0)
    assert limit.limit == before


def test_a_fixed_admission_keeps_its_limit() -> None:
    admission = Admission(4, 0)
    for seconds in (1.0, 50.0, 1.0, 50.0):
        admission.record_service(seconds)
    assert admission.limit == 4 and admission.limiter is None


# ------------------------------------------------------------------ FIFO waiters and counts


def test_waiters_get_slots_in_arrival_order_and_counts_stay_exact() -> None:
    load = LoadCounts()
    admission = Admission(1, 10, load)
    order: list[str] = []
    release = {name: asyncio.Event() for name in "ABCDE"}

    async def question(name: str) -> None:
        async with admission.slot():
            order.append(name)
            await release[name].wait()

    async def scenario() -> None:
        tasks = {}
        for name in "ABCD":
            tasks[name] = asyncio.create_task(question(name))
            await asyncio.sleep(0)
        assert order == ["A"] and (load.running, load.waiting) == (1, 3)
        tasks["C"].cancel()  # leaves the line without ever holding a slot
        await asyncio.sleep(0)
        assert (load.running, load.waiting) == (1, 2)
        tasks["E"] = asyncio.create_task(question("E"))
        await asyncio.sleep(0)
        assert (load.running, load.waiting) == (1, 3)
        for name in "ABDE":
            release[name].set()
            await tasks[name]
            await asyncio.sleep(0)
        assert tasks["C"].cancelled()
        assert order == ["A", "B", "D", "E"]
        assert (load.running, load.waiting) == (0, 0)
        assert await admission.drain(1)

    asyncio.run(scenario())


def test_a_waiter_cancelled_as_its_slot_is_handed_over_gives_it_back() -> None:
    load = LoadCounts()
    admission = Admission(1, 10, load)

    async def scenario() -> None:
        first = admission.slot()
        await first.__aenter__()
        waiter_entered = asyncio.Event()

        async def second() -> None:
            async with admission.slot():
                waiter_entered.set()

        task = asyncio.create_task(second())
        await asyncio.sleep(0)
        assert (load.running, load.waiting) == (1, 1)
        await first.__aexit__(None, None, None)  # hands the slot to the waiter ...
        assert (load.running, load.waiting) == (1, 0)
        task.cancel()  # ... which is cancelled before it could run
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled() and not waiter_entered.is_set()
        assert (load.running, load.waiting) == (0, 0)
        async with admission.slot() as waited_s:  # the slot is free again, at once
            assert waited_s >= 0 and load.running == 1
        assert await admission.drain(1)

    asyncio.run(scenario())


def test_a_newcomer_behind_a_cancelled_waiter_is_not_stranded() -> None:
    load = LoadCounts()
    admission = Admission(1, 10, load)

    async def scenario() -> None:
        first = admission.slot()
        await first.__aenter__()
        stuck_slot, new_slot = admission.slot(), admission.slot()  # referenced: not finalized
        stuck = asyncio.create_task(stuck_slot.__aenter__())
        await asyncio.sleep(0)
        stuck.cancel()  # its task has not yet left the line ...
        await first.__aexit__(None, None, None)
        newcomer = asyncio.create_task(new_slot.__aenter__())  # ... when this arrives
        await asyncio.wait_for(newcomer, 5)
        assert stuck.cancelled() and (load.running, load.waiting) == (1, 0)
        await new_slot.__aexit__(None, None, None)
        assert (load.running, load.waiting) == (0, 0)

    asyncio.run(scenario())


# ------------------------------------------------------------------ wait-time admission


def test_a_question_predicted_to_wait_too_long_is_refused() -> None:
    load = LoadCounts()
    admission = Admission(2, 100, load, max_queue_wait_s=15.0)
    for _ in range(60):
        admission.record_service(10.0)
    assert admission.mean_service_s == pytest.approx(10.0, abs=1e-3)

    async def scenario() -> None:
        held = [admission.slot() for _ in range(2)]
        for slot in held:
            await slot.__aenter__()
        assert admission.predicted_wait_s() == pytest.approx(5.0, abs=1e-3)  # 1 x 10 s / 2
        waiters = []
        for _ in range(2):  # predicted 5 s, then 10 s: under the bound, admitted to wait
            admission.check()
            waiters.append(asyncio.create_task(admission.slot().__aenter__()))
            await asyncio.sleep(0)
        assert admission.predicted_wait_s() == pytest.approx(15.0, abs=1e-2)
        admission.record_service(10.001)  # just over: 3 x 10.0002 / 2 > 15
        with pytest.raises(OverloadedError) as refused:
            admission.check()
        assert refused.value.retry_after_s >= 1
        assert refused.value.retry_after_s == math.ceil(admission.mean_service_s * 3 / 2)
        assert load.waiting == 2  # refused at the door: never counted
        for task in waiters:
            task.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
        assert (load.running, load.waiting) == (2, 0)

    asyncio.run(scenario())


def test_the_wait_bound_follows_the_service_time_at_low_load() -> None:
    admission = Admission(
        16, 100, adaptive=True, max_queue_wait_s=15.0, max_queue_wait_services=1.0
    )
    assert admission.wait_bound_s() == pytest.approx(5.0)  # nothing measured: the 5 s seed
    for _ in range(30):  # 2 s per question while one was at work
        admission.record_service(2.0, peak=1)
    assert admission.base_service_s == pytest.approx(2.0, abs=1e-3)
    assert admission.wait_bound_s() == pytest.approx(2.0, abs=1e-3)  # one answer's time
    assert admission.limit == 2

    async def scenario() -> None:
        held = [admission.slot() for _ in range(2)]
        for slot in held:
            await slot.__aenter__()
        admission.check()  # predicted 1 x 2 s / 2: within one answer's time
        waiters = [asyncio.create_task(admission.slot().__aenter__())]
        await asyncio.sleep(0)
        bound = admission.wait_bound_s()
        assert bound is not None and admission.predicted_wait_s() > bound
        with pytest.raises(OverloadedError, match="predicted wait of 2 s"):
            admission.check()  # 2 x (2 s and a little, the recent mean) / 2
        for task in waiters:
            task.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)

    asyncio.run(scenario())
    for _ in range(30):  # slower under load: the baseline, and so the bound, stay put
        admission.record_service(3.5, peak=16)
    assert admission.wait_bound_s() == pytest.approx(2.0, abs=1e-3)


def test_the_absolute_bound_caps_the_relative_one() -> None:
    admission = Admission(4, 100, max_queue_wait_s=3.0, max_queue_wait_services=1.0)
    for _ in range(40):
        admission.record_service(60.0)  # a fixed limit: the bound follows the recent mean
    assert admission.wait_bound_s() == 3.0
    assert Admission(4, 4).wait_bound_s() is None


def test_without_a_bound_only_the_queue_length_refuses() -> None:
    admission = Admission(1, 1)
    admission.record_service(1000.0)

    async def scenario() -> None:
        first = admission.slot()
        await first.__aenter__()
        admission.check()  # a long predicted wait, but no bound and room in the queue
        waiter = asyncio.create_task(admission.slot().__aenter__())
        await asyncio.sleep(0)
        with pytest.raises(OverloadedError):
            admission.check()
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)

    asyncio.run(scenario())


# ------------------------------------------------------------------ settings and metrics


def test_settings_choose_a_fixed_or_adaptive_limit(tmp_path: Path) -> None:
    fixed = ServerState(
        settings(
            tmp_path, adaptive_concurrency=False, max_concurrent_questions=5, max_queue_wait_s=None
        )
    )
    assert fixed.admission.limit == 5 and fixed.admission.limiter is None
    assert fixed.admission.max_queue_wait_s is None
    adaptive = ServerState(settings(tmp_path, max_queue_wait_s=7.5))
    assert adaptive.admission.limit == 2 and adaptive.admission.limiter is not None
    assert adaptive.admission.max_queue_wait_s == 7.5
    assert adaptive.telemetry.load.limit == 2


def test_the_collector_exposes_the_current_limit() -> None:
    telemetry = Telemetry()
    admission = Admission(8, 8, telemetry.load, adaptive=True)
    telemetry.watch_engine(lambda: None)
    assert telemetry.registry.get_sample_value("ragguard:concurrency_limit") == 2
    for _ in range(2):
        admission.record_service(1.0)
    assert telemetry.registry.get_sample_value("ragguard:concurrency_limit") == 3


class _Stop(Exception):
    pass


def test_loop_lag_is_how_late_the_sleeper_woke() -> None:
    seen: list[float] = []
    ticks: Iterator[float] = iter([0.0, 0.251, 1.0, 1.0])

    def observe(lag: float) -> None:
        seen.append(lag)
        if len(seen) == 2:
            raise _Stop

    with pytest.raises(_Stop):
        asyncio.run(watch_loop_lag(observe, interval_s=0.001, clock=lambda: next(ticks)))
    assert seen[0] == pytest.approx(0.25) and seen[1] == 0.0  # early counts as on time


def test_the_app_serves_the_limit_and_the_loop_lag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rag.server import app as app_module

    def no_model(state: ServerState) -> None:  # what loading does for metrics, without a model
        state.telemetry.watch_engine(lambda: None)

    monkeypatch.setattr(app_module, "_load", no_model)
    app = app_module.create_app(settings(tmp_path))
    with TestClient(app) as http:
        registry = app.state.ragguard.telemetry.registry
        for _ in range(300):
            lag_count = registry.get_sample_value("ragguard:event_loop_lag_seconds_count")
            limit = registry.get_sample_value("ragguard:concurrency_limit")
            if lag_count and limit is not None:
                break
            time.sleep(0.1)
        text = http.get("/metrics").text
    assert "ragguard:concurrency_limit 2.0" in text
    assert "ragguard:event_loop_lag_seconds_bucket" in text
    assert registry.get_sample_value("ragguard:event_loop_lag_seconds_count") >= 1


def test_an_empty_setting_turns_a_bound_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("MAX_QUEUE_WAIT_S", "MAX_QUEUE_WAIT_SERVICES", "REQUEST_TIMEOUT_S"):
        monkeypatch.setenv(f"RAGGUARD_{name}", "")
    state = ServerState(settings(tmp_path))
    assert state.settings.server.request_timeout_s is None
    assert state.admission.wait_bound_s() is None
