"""Prometheus metrics, vLLM's set under our prefix (``ragguard:``), one registry per app.

Latencies are observed where the user sees them, on the server's stream of answer events:
time to first token and end-to-end from the request's arrival, gaps between token events, and
queue time (waiting for a slot, then for the engine's first step). Engine gauges and counters
are read from the engine client's stats at scrape time, the process's resident memory likewise.
The app's registry is its own, so prometheus_client's default ``process_*`` metrics are not in
it: ours carry the prefix.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from engine import EngineStats
from guards import Action
from rag.review_desk.risk import CollectionRisk
from rag.server.resources import process_rss_bytes, resource_fields
from rag.types import AskEvent, ResultEvent, TokenEvent

logger = logging.getLogger(__name__)
PREFIX = "ragguard:"
_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320)
_TOKEN_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5, 5)
_LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


@dataclass(slots=True)
class LoadCounts:
    """Questions the server is working on and those waiting for a slot."""

    running: int = 0
    waiting: int = 0
    limit: int = 0
    """Questions that may be at work at once now (the admission's current limit)."""


class _EngineCollector(Collector):
    """Engine and admission state, read when Prometheus scrapes."""

    def __init__(self, stats: Callable[[], EngineStats | None], load: Callable[[], LoadCounts]):
        self.stats = stats
        self.load = load

    def collect(self) -> Iterator[Metric]:
        load = self.load()
        stats = self.stats()
        engine_waiting = stats.num_waiting if stats is not None else 0
        yield _gauge("num_requests_running", "questions being answered", load.running)
        yield _gauge(
            "num_requests_waiting",
            "questions waiting for a slot plus engine sequences waiting to be scheduled",
            load.waiting + engine_waiting,
        )
        yield _gauge(
            "concurrency_limit", "questions that may be at work at once now (adaptive)", load.limit
        )
        if stats is None:
            return
        yield _gauge("num_sequences_running", "sequences in the engine's batch", stats.num_running)
        used = stats.num_kv_blocks_used / stats.num_kv_blocks if stats.num_kv_blocks else 0.0
        yield _gauge("kv_cache_usage_perc", "share of KV-cache blocks in use (0-1)", used)
        yield _gauge("kv_cache_blocks_used", "KV-cache blocks in use", stats.num_kv_blocks_used)
        yield _gauge(
            "kv_cache_blocks_free",
            "KV-cache blocks not in use",
            stats.num_kv_blocks - stats.num_kv_blocks_used,
        )
        yield _counter("engine_steps", "engine steps that ran a batch", stats.num_steps)
        yield _counter(
            "engine_step_seconds",
            "time spent in those steps (divide by engine_steps for the mean step time)",
            stats.step_time_s,
        )
        yield _counter("prompt_tokens", "prompt tokens processed", stats.num_prompt_tokens)
        yield _counter("generation_tokens", "tokens generated", stats.num_generated_tokens)
        yield _counter("prefix_cache_queries", "prompt blocks looked up", stats.num_prefix_queries)
        yield _counter("prefix_cache_hits", "prompt blocks found cached", stats.num_prefix_hits)
        yield _counter(
            "num_preemptions", "sequences preempted for lack of KV blocks", stats.num_preemptions
        )
        yield _counter(
            "spec_decode_num_draft_tokens", "draft tokens computed", stats.num_draft_tokens
        )
        yield _counter(
            "spec_decode_num_accepted_tokens",
            "draft tokens the model agreed with",
            stats.num_accepted_tokens,
        )
        yield _counter(
            "spec_decode_num_steps_off",
            "engine steps that drafted nothing because too many sequences were decoding",
            stats.num_steps_without_speculation,
        )
        yield from _cuda_gauges(stats)


def _cuda_gauges(stats: EngineStats) -> Iterator[Metric]:
    """The engine's CUDA device; nothing on any other device (the stats have None)."""
    if stats.cuda_memory_allocated_bytes is not None:
        yield _gauge(
            "cuda_memory_allocated_bytes",
            "engine device memory held by tensors (weights, KV cache, activations)",
            stats.cuda_memory_allocated_bytes,
        )
    if stats.cuda_memory_reserved_bytes is not None:
        yield _gauge(
            "cuda_memory_reserved_bytes",
            "engine device memory held by the caching allocator",
            stats.cuda_memory_reserved_bytes,
        )
    if stats.gpu_utilization is not None:
        yield _gauge(
            "gpu_utilization_perc",
            "share of NVML's latest sample period in which a kernel ran (0-1)",
            stats.gpu_utilization,
        )


class _ProcessCollector(Collector):
    """The server process's resident memory, read when Prometheus scrapes."""

    def collect(self) -> Iterator[Metric]:
        rss = process_rss_bytes()
        if rss is not None:  # an unknown figure is left out, not reported as 0
            yield _gauge("process_resident_memory_bytes", "the server's resident memory", rss)


_RISK_GAUGES = (
    ("risk_labels", "reviewer labels of the collection (flagged and audit)", "labels"),
    ("risk_calibration_version", "the collection's calibration version in force (0: shipped)",
     "calibration_version"),
    ("risk_threshold", "the certified answer threshold (absent: not calibrated)", "threshold"),
    ("risk_estimate", "the labels' estimate of the risk at the threshold", "risk_estimate"),
    ("risk_bound", "its upper confidence bound (at most the target risk)", "risk_bound"),
    ("risk_coverage", "share of labelled questions the threshold answers", "coverage"),
)  # fmt: skip


class _CacheCollector(Collector):
    """The answer cache's lookups, read when scraped."""

    def __init__(self, counts: Callable[[], tuple[int, int]]):
        self.counts = counts

    def collect(self) -> Iterator[Metric]:
        hits, misses = self.counts()
        yield _counter("answer_cache_hits", "questions answered from the answer cache", hits)
        yield _counter("answer_cache_misses", "answer cache lookups that found nothing", misses)


class _RiskCollector(Collector):
    """Each collection's labels, calibration and certified threshold, read when scraped."""

    def __init__(self, status: Callable[[], list[CollectionRisk]]):
        self.status = status

    def collect(self) -> Iterator[Metric]:
        try:
            rows = [r.as_dict() for r in self.status()]
        except Exception as exc:  # the review store is down: the other metrics still scrape
            logger.warning("risk metrics left out: %s", exc)
            rows = []
        for name, doc, key in _RISK_GAUGES:
            family = GaugeMetricFamily(PREFIX + name, doc, labels=["index", "profile"])
            for row in rows:
                value = row.get(key)
                if isinstance(value, int | float):
                    family.add_metric([str(row["index"]), str(row["profile"])], float(value))
            yield family


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(PREFIX + name, doc, value=value)


@dataclass(slots=True)
class Telemetry:
    """The app's metrics; ``track`` observes one question's event stream."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    load: LoadCounts = field(default_factory=LoadCounts)
    ttft: Histogram = field(init=False)
    itl: Histogram = field(init=False)
    e2e: Histogram = field(init=False)
    queue: Histogram = field(init=False)
    loop_lag: Histogram = field(init=False)
    rejected: Counter = field(init=False)
    decisions: Counter = field(init=False)
    guard_outcomes: Counter = field(init=False)
    reviews_queued: Counter = field(init=False)
    feedback: Counter = field(init=False)
    degraded: Counter = field(init=False)
    engine_stats: Callable[[], EngineStats | None] | None = field(default=None, init=False)
    """The engine client's stats, once the engine is loaded."""

    def __post_init__(self) -> None:
        r = self.registry
        r.register(_ProcessCollector())
        self.ttft = self._histogram(
            "time_to_first_token_seconds", "arrival to the first token sent", _LATENCY_BUCKETS
        )
        self.itl = self._histogram(
            "inter_token_latency_seconds", "gap between consecutive token events", _TOKEN_BUCKETS
        )
        self.e2e = self._histogram(
            "e2e_request_latency_seconds", "arrival to the final answer", _LATENCY_BUCKETS
        )
        self.queue = self._histogram(
            "request_queue_time_seconds",
            "time waiting for a slot and for the engine's first step",
            _LATENCY_BUCKETS,
        )
        self.loop_lag = self._histogram(
            "event_loop_lag_seconds",
            "how late the event loop woke a task that slept 100 ms (stalls, CPU starvation)",
            _LAG_BUCKETS,
        )
        self.rejected = Counter(
            PREFIX + "request_rejected", "questions refused (429) under overload", registry=r
        )
        self.decisions = Counter(
            PREFIX + "decisions", "answers by decision", ["decision"], registry=r
        )
        self.guard_outcomes = Counter(
            PREFIX + "guard_outcomes", "guard verdicts", ["guard", "outcome"], registry=r
        )
        self.reviews_queued = Counter(
            PREFIX + "review_items_queued", "answers queued for human review", registry=r
        )
        self.feedback = Counter(
            PREFIX + "feedback", "end-user feedback on answers", ["index", "rating"], registry=r
        )
        self.degraded = Counter(
            PREFIX + "degraded_answers",
            "answers that skipped work under load, by step (samples, judge)",
            ["step"],
            registry=r,
        )

    def _histogram(self, name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
        return Histogram(PREFIX + name, doc, buckets=buckets, registry=self.registry)

    def watch_engine(self, stats: Callable[[], EngineStats | None]) -> None:
        """Expose the engine's gauges and counters (once, when the engine is loaded)."""
        self.engine_stats = stats
        self.registry.register(_EngineCollector(stats, lambda: self.load))

    def resource_fields(self) -> dict[str, Any]:
        """Resource figures for a request's log record (``rag.server.resources``)."""
        return resource_fields(self.engine_stats() if self.engine_stats is not None else None)

    def watch_risk(self, status: Callable[[], list[CollectionRisk]]) -> None:
        """Expose each collection's risk control (once, when the pipeline is loaded)."""
        self.registry.register(_RiskCollector(status))

    def watch_cache(self, counts: Callable[[], tuple[int, int]]) -> None:
        """Expose the answer cache's hits and misses (once, when the pipeline is loaded)."""
        self.registry.register(_CacheCollector(counts))

    async def track(
        self, events: AsyncIterator[AskEvent], arrival: float, slot_wait_s: float
    ) -> AsyncIterator[AskEvent]:
        """Pass the events on, observing latencies and the final decision."""
        last_token: float | None = None
        async for event in events:
            now = time.perf_counter()
            if isinstance(event, TokenEvent):
                if last_token is None:
                    self.ttft.observe(now - arrival)
                else:
                    self.itl.observe(now - last_token)
                last_token = now
            elif isinstance(event, ResultEvent):
                result = event.result
                self.e2e.observe(now - arrival)
                engine_queue = result.timings.get("queue_s", 0.0)
                self.queue.observe(slot_wait_s + engine_queue)
                self.decisions.labels(result.decision.value).inc()
                for verdict in result.guard_results:
                    self.guard_outcomes.labels(verdict.name, verdict.outcome).inc()
                if result.decision is Action.REVIEW and result.review_id is not None:
                    self.reviews_queued.inc()
                for step in result.degraded:
                    self.degraded.labels(step).inc()
            yield event
