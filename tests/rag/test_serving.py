"""Serving over the async engine: streaming, disconnects, backpressure, deadlines, metrics.

A live uvicorn server on 127.0.0.1 (real sockets, so a client can really hang up) over the real
pipeline and engine.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from engine import AsyncEngine
from rag import AsyncClient, Client
from rag.errors import DeadlineExceededError, OverloadedError
from rag.server import create_app
from rag.types import PassagesEvent, ResultEvent, TokenEvent

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from engine import LLMEngine, RequestOutput
    from rag.pipeline import Pipeline
    from rag.server.state import ServerState
    from rag.stages.check import Checked

QUESTION = "What does a KV cache avoid recomputing?"


@dataclass
class Live:
    url: str
    pipeline: Pipeline
    state: ServerState

    @property
    def engine(self) -> LLMEngine:
        """The engine under the pipeline's AsyncEngine (the pipeline wraps the LLMEngine)."""
        client = self.pipeline.engine
        assert isinstance(client, AsyncEngine)
        return client.engine


@pytest.fixture
def live(demo_pipeline: Pipeline, live_server: Callable[[ASGIApp], str]) -> Live:
    app = create_app(pipeline=demo_pipeline)
    return Live(live_server(app), demo_pipeline, app.state.ragguard)


def metrics(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics").text
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


def slow_down(engine: LLMEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """0.1 s more per engine step, so a generation is surely still running when a client leaves."""
    step = engine.step

    def slow_step() -> list[RequestOutput]:
        time.sleep(0.1)
        return step()

    monkeypatch.setattr(engine, "step", slow_step)


def sse(response: httpx.Response) -> Iterator[tuple[str, dict]]:
    event = "message"
    for line in response.iter_lines():
        if line.startswith("event:"):
            event = line.split(":", 1)[1].strip()
        elif line.startswith("data:"):
            yield event, json.loads(line.split(":", 1)[1])


def test_streamed_answer_events_come_in_order_and_match_the_whole_answer(live: Live) -> None:
    body = {"question": QUESTION, "max_tokens": 24, "stream": True}
    with httpx.stream("POST", f"{live.url}/v1/ask", json=body, timeout=120) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = list(sse(response))
    kinds = [k for k, _ in events]
    assert kinds[0] == "passages" and kinds[-1] == "result"
    assert set(kinds[1:-1]) == {"token"} and len(kinds) > 4
    passages = events[0][1]["passages"]
    assert passages and passages[0]["doc_id"] == "kv-cache.md"
    result = events[-1][1]
    streamed = "".join(data["text"] for kind, data in events if kind == "token")
    assert streamed.strip() == result["answer"]  # guards passed: the answer is what streamed
    assert result["decision"] == "answer" and result["citations"] and result["guard_results"]
    whole = httpx.post(
        f"{live.url}/v1/ask", json={"question": QUESTION, "max_tokens": 24}, timeout=120
    ).json()
    assert whole["answer"] == result["answer"]  # greedy: the same text either way


def test_sdk_clients_iterate_over_the_stream(live: Live) -> None:
    with Client(live.url) as client:
        events = list(client.ask_stream(QUESTION, max_tokens=16))
    assert isinstance(events[0], PassagesEvent) and isinstance(events[-1], ResultEvent)
    tokens = "".join(e.text for e in events if isinstance(e, TokenEvent))
    assert tokens.strip() == events[-1].result.answer

    async def collect() -> list[object]:
        async with AsyncClient(live.url) as client:
            return [e async for e in client.ask_stream(QUESTION, max_tokens=16)]

    async_events = asyncio.run(collect())
    assert isinstance(async_events[-1], ResultEvent)
    assert async_events[-1].result.answer == events[-1].result.answer


def test_a_client_that_disconnects_stops_its_generation_and_queues_nothing(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = live.engine
    slow_down(engine, monkeypatch)
    before = metrics(live.url)["ragguard:generation_tokens_total"]
    # Everything would go to review if it were answered: nothing may, as nobody is listening.
    body = {"question": QUESTION, "max_tokens": 300, "review_below": 1.0, "abstain_below": 0.0}

    # Streaming: read the first token, then hang up.
    with httpx.stream("POST", f"{live.url}/v1/ask", json={**body, "stream": True}) as response:
        for kind, _ in sse(response):
            if kind == "token":
                break
    wait_until(lambda: metrics(live.url)["ragguard:num_requests_running"] == 0, "stream stopped")
    wait_until(lambda: not engine.has_unfinished_requests(), "engine idle")

    # Not streaming: a raw socket that sends the request, waits until it runs, and closes.
    payload = json.dumps(body).encode()
    host, port = live.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            f"POST /v1/ask HTTP/1.1\r\nHost: {host}:{port}\r\n".encode()
            + b"Content-Type: application/json\r\n"
            + f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        wait_until(
            lambda: metrics(live.url)["ragguard:num_sequences_running"] >= 1, "generation started"
        )
    wait_until(lambda: metrics(live.url)["ragguard:num_sequences_running"] == 0, "abort")
    wait_until(lambda: metrics(live.url)["ragguard:num_requests_running"] == 0, "slot freed")
    assert engine.block_manager.num_used_blocks == 0
    generated = metrics(live.url)["ragguard:generation_tokens_total"] - before
    assert generated < 2 * 100, f"{generated} tokens generated for clients that left"
    items, total = live.pipeline.reviews.store.list_items()
    assert total == 0 and items == []


def test_overload_is_refused_with_429_and_retry_after(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rag.server.admission import Admission

    # One slot and no waiting room; the first question holds the slot until released.
    live.state.admission = Admission(1, 0, live.state.telemetry.load)
    checker, checking, release = live.pipeline.checker, threading.Event(), threading.Event()
    assert checker is not None  # the guards are on by default
    check = checker.check

    def held_check(*args: Any, **kwargs: Any) -> Checked:
        checking.set()
        release.wait(timeout=120)
        return check(*args, **kwargs)

    monkeypatch.setattr(checker, "check", held_check)
    body = {"question": QUESTION, "max_tokens": 8, "stream": True}
    with httpx.stream("POST", f"{live.url}/v1/ask", json=body, timeout=120) as held:
        assert checking.wait(timeout=120)  # the slot is taken: its answer is being checked
        refused = httpx.post(f"{live.url}/v1/ask", json={"question": QUESTION}, timeout=30)
        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.json()["error"] == "overloaded"
        streamed = httpx.post(f"{live.url}/v1/ask", json={**body}, timeout=30)
        assert streamed.status_code == 429  # a stream is refused before it starts, too
        with Client(live.url) as client, pytest.raises(OverloadedError) as caught:
            client.ask(QUESTION)
        assert caught.value.retry_after_s >= 1
        health = httpx.get(f"{live.url}/healthz", timeout=5)
        assert health.status_code == 200
        release.set()
        assert list(sse(held))[-1][0] == "result"
    assert metrics(live.url)["ragguard:request_rejected_total"] == 3


def test_a_deadline_ends_with_504_and_stops_the_generation(live: Live) -> None:
    engine = live.engine
    body = {"question": QUESTION, "max_tokens": 300, "timeout_s": 0.05}
    response = httpx.post(f"{live.url}/v1/ask", json=body, timeout=60)
    assert response.status_code == 504, response.text
    assert response.json()["error"] == "deadline_exceeded"
    assert "0.05 s deadline" in response.json()["detail"]
    wait_until(lambda: not engine.has_unfinished_requests(), "engine idle")
    assert engine.block_manager.num_used_blocks == 0
    with Client(live.url) as client, pytest.raises(DeadlineExceededError):
        client.ask(QUESTION, timeout_s=0.05)
    with httpx.stream("POST", f"{live.url}/v1/ask", json={**body, "stream": True}) as streamed:
        kinds = [(k, d) for k, d in sse(streamed)]
    assert kinds[-1][0] == "error" and kinds[-1][1]["error"] == "deadline_exceeded"
    bad = httpx.post(f"{live.url}/v1/ask", json={"question": QUESTION, "timeout_s": 0})
    assert bad.status_code == 422


def test_metrics_are_prometheus_histograms_gauges_and_counters(live: Live) -> None:
    body = {"question": QUESTION, "max_tokens": 12}
    assert httpx.post(f"{live.url}/v1/ask", json=body, timeout=120).status_code == 200
    with httpx.stream("POST", f"{live.url}/v1/ask", json={**body, "stream": True}) as response:
        list(sse(response))
    text = httpx.get(f"{live.url}/metrics").text
    values = metrics(live.url)
    for histogram in (
        "time_to_first_token_seconds",
        "inter_token_latency_seconds",
        "e2e_request_latency_seconds",
        "request_queue_time_seconds",
    ):
        assert f"# TYPE ragguard:{histogram} histogram" in text
    assert values["ragguard:e2e_request_latency_seconds_count"] == 2
    assert values["ragguard:time_to_first_token_seconds_count"] == 2
    assert values["ragguard:inter_token_latency_seconds_count"] >= 2
    decided = {k: v for k, v in values.items() if k.startswith("ragguard:decisions_total{")}
    assert sum(decided.values()) == 2  # answer, review or abstain: each counted once
    reviewed = values.get('ragguard:decisions_total{decision="review"}', 0)
    assert values["ragguard:review_items_queued_total"] == reviewed
    outcomes = [
        k for k in values if k.startswith('ragguard:guard_outcomes_total{guard="grounding"')
    ]
    assert sum(values[k] for k in outcomes) == 2
    assert values["ragguard:prompt_tokens_total"] > 100
    assert values["ragguard:generation_tokens_total"] >= 2
    assert (
        values["ragguard:prefix_cache_queries_total"] >= values["ragguard:prefix_cache_hits_total"]
    )
    assert values["ragguard:prefix_cache_hits_total"] > 0  # the second ask reused the prompt
    # Speculative decoding is off by default: its counters are there, at zero.
    for counter in ("num_draft_tokens", "num_accepted_tokens", "num_steps_off"):
        assert values[f"ragguard:spec_decode_{counter}_total"] == 0
    assert 0 <= values["ragguard:kv_cache_usage_perc"] <= 1
    assert values["ragguard:num_requests_running"] == 0
    assert values["ragguard:num_requests_waiting"] == 0
    assert values["ragguard:request_rejected_total"] == 0
    # Resources: the KV pool as the engine counts it (idle now, so the figures hold still), the
    # steps that answered, the server's memory; no CUDA figures on the CPU.
    wait_until(lambda: not live.engine.has_unfinished_requests(), "engine idle")
    values = metrics(live.url)
    stats = live.engine.stats()
    assert values["ragguard:kv_cache_blocks_used"] == stats.num_kv_blocks_used
    assert values["ragguard:kv_cache_blocks_free"] == stats.num_kv_blocks - stats.num_kv_blocks_used
    assert values["ragguard:kv_cache_blocks_free"] > 0
    assert values["ragguard:engine_steps_total"] == stats.num_steps >= 2  # one per ask at least
    assert values["ragguard:engine_step_seconds_total"] == pytest.approx(stats.step_time_s)
    assert values["ragguard:engine_step_seconds_total"] > 0
    assert values["ragguard:process_resident_memory_bytes"] > 100 << 20  # the model is in it
    assert not [name for name in values if name.startswith(("ragguard:cuda", "ragguard:gpu"))]


def test_speculative_decoding_counters_come_from_the_engine_stats() -> None:
    from prometheus_client import CollectorRegistry

    from engine import EngineStats
    from rag.server.telemetry import LoadCounts, _EngineCollector

    stats = EngineStats(
        num_running=1,
        num_waiting=0,
        num_kv_blocks=10,
        num_kv_blocks_used=2,
        prefix_cache_hit_rate=0.0,
        num_preemptions=0,
        num_generated_tokens=40,
        generated_tokens_per_s=1.0,
        num_draft_tokens=30,
        num_accepted_tokens=12,
        num_steps_without_speculation=5,
    )
    registry = CollectorRegistry()
    registry.register(_EngineCollector(lambda: stats, LoadCounts))
    value = registry.get_sample_value
    assert value("ragguard:spec_decode_num_draft_tokens_total") == 30
    assert value("ragguard:spec_decode_num_accepted_tokens_total") == 12
    assert value("ragguard:spec_decode_num_steps_off_total") == 5


def test_resource_metrics_come_from_the_process_and_the_engine_stats() -> None:
    from dataclasses import replace

    from prometheus_client import generate_latest

    from engine import EngineStats
    from rag.server.telemetry import Telemetry

    telemetry = Telemetry()
    value = telemetry.registry.get_sample_value
    # Before the engine has loaded: the server's memory only. The app's registry has no
    # default process collector of prometheus_client: our name is the only one.
    rss = value("ragguard:process_resident_memory_bytes")
    assert rss is not None and rss > 0
    assert value("process_resident_memory_bytes") is None
    assert value("ragguard:kv_cache_blocks_used") is None
    on_cpu = EngineStats(
        num_running=1,
        num_waiting=0,
        num_kv_blocks=10,
        num_kv_blocks_used=3,
        prefix_cache_hit_rate=0.0,
        num_preemptions=0,
        num_generated_tokens=40,
        generated_tokens_per_s=1.0,
        num_steps=4,
        step_time_s=0.5,
    )
    current = [on_cpu]
    telemetry.watch_engine(lambda: current[0])
    assert value("ragguard:kv_cache_blocks_used") == 3
    assert value("ragguard:kv_cache_blocks_free") == 7
    assert value("ragguard:kv_cache_usage_perc") == 0.3
    assert value("ragguard:engine_steps_total") == 4
    assert value("ragguard:engine_step_seconds_total") == 0.5
    names = {family.name for family in telemetry.registry.collect()}
    assert not {n for n in names if n.startswith(("ragguard:cuda", "ragguard:gpu"))}
    current[0] = replace(
        on_cpu,
        cuda_memory_allocated_bytes=3 << 30,
        cuda_memory_reserved_bytes=4 << 30,
        gpu_utilization=0.25,
    )
    assert value("ragguard:cuda_memory_allocated_bytes") == 3 << 30
    assert value("ragguard:cuda_memory_reserved_bytes") == 4 << 30
    assert value("ragguard:gpu_utilization_perc") == 0.25
    current[0] = replace(current[0], gpu_utilization=None)  # CUDA without NVML
    assert value("ragguard:gpu_utilization_perc") is None
    assert value("ragguard:cuda_memory_reserved_bytes") == 4 << 30
    text = generate_latest(telemetry.registry).decode()
    declared = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(declared) == len(set(declared))  # no name twice


def test_the_openai_routes_end_at_a_deadline_and_when_the_client_leaves(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The raw routes share /v1/ask's rules: a 504 in OpenAI's error shape at the deadline, and
    a streamed completion whose client hangs up is aborted, its KV blocks freed."""
    engine = live.engine
    model = live.pipeline.engine.model_name
    chat = {"model": model, "messages": [{"role": "user", "content": "Count to a thousand."}]}
    late = httpx.post(
        f"{live.url}/v1/chat/completions",
        json={**chat, "max_tokens": 300, "timeout_s": 0.05},
        timeout=60,
    )
    assert late.status_code == 504, late.text
    error = late.json()["error"]
    assert error["type"] == "server_error" and "deadline" in error["message"]
    wait_until(lambda: not engine.has_unfinished_requests(), "engine idle after the deadline")
    assert engine.block_manager.num_used_blocks == 0

    slow_down(engine, monkeypatch)
    before = metrics(live.url)["ragguard:generation_tokens_total"]
    body = {**chat, "max_tokens": 300, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", f"{live.url}/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and '"content"' in line:
                break  # the first chunk: hang up mid-generation
    wait_until(lambda: metrics(live.url)["ragguard:num_sequences_running"] == 0, "abort")
    wait_until(lambda: not engine.has_unfinished_requests(), "engine idle after the hang-up")
    assert engine.block_manager.num_used_blocks == 0
    generated = metrics(live.url)["ragguard:generation_tokens_total"] - before
    assert generated < 100, f"{generated} tokens generated for a client that left"
