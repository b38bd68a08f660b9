"""Degrade under load: the steps chosen from the queue, an answer made without its extra samples
says so and its confidence comes from the signals it had, and the server applies the steps
(TestClient, real stages with the scripted generator)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from guards import Policy
from rag.pipeline import Pipeline
from rag.server import create_app
from rag.server.degrade import Degrader
from rag.settings import Settings
from rag.types import AskOptions, GuardReport
from tests.fakes import HashingEmbedder, ScriptedGenerator
from tests.server_state import server_state

QUESTION = "What does a KV cache avoid recomputing?"


def test_the_steps_follow_the_queue_length_and_the_recent_wait() -> None:
    degrader = Degrader(waiting=4, queue_s=5.0)
    assert degrader.steps(0, 0.0) == ()
    assert degrader.steps(3, 0.0) == ()
    assert degrader.steps(4, 0.0) == ("samples",)
    assert degrader.steps(8, 0.0) == ("samples", "judge")
    assert degrader.steps(80, 0.0) == ("samples", "judge")
    # A wait of 50 s moves the recent average to 10 s: twice the 5 s threshold.
    assert degrader.steps(0, 50.0) == ("samples", "judge")
    assert degrader.recent_wait_s == pytest.approx(10.0)
    for _ in range(20):  # the load passes: short waits bring the average down again
        degrader.steps(0, 0.0)
    assert degrader.steps(0, 0.0) == ()
    off = Degrader(waiting=0, queue_s=0.0)
    assert not off.enabled and off.steps(1000, 1000.0) == ()


@pytest.fixture
def sampled(settings: Settings, fake_pipeline: Pipeline) -> Pipeline:
    """The fake pipeline, asking two extra samples of every question."""
    pipe = Pipeline(
        settings.updated(**{"num_candidates": 3}),
        HashingEmbedder(),
        ScriptedGenerator(),
        retriever=fake_pipeline.retriever,
    )
    assert pipe.checker is not None
    pipe.checker.policy = Policy(abstain_below=0.0, review_below=0.0)
    return pipe


def _consistency(reports: list[GuardReport]) -> str:
    return next(g.outcome for g in reports if g.name == "self_consistency")


def test_an_answer_without_its_samples_says_so(sampled: Pipeline) -> None:
    try:
        full = sampled.ask_with(QUESTION, AskOptions())
        light = sampled.ask_with(QUESTION, AskOptions(), degrade=("samples", "judge"))
    finally:
        sampled.close()
    assert full.degraded == [] and len(full.samples) == 3
    assert _consistency(full.guard_results) != "abstain"
    # No judge is configured: skipping it skips nothing, so only the samples are reported.
    assert light.degraded == ["samples"] and len(light.samples) == 1
    assert _consistency(light.guard_results) == "abstain"
    # The consistency signals are there when the samples were, and absent (not 0) without them.
    assert {"agreement", "semantic_entropy"} <= set(full.confidence_signals)
    assert not {"agreement", "semantic_entropy"} & set(light.confidence_signals)
    assert light.confidence is not None and light.answer == full.answer


def test_nothing_to_skip_is_not_a_degradation(fake_pipeline: Pipeline) -> None:
    result = fake_pipeline.ask_with(QUESTION, AskOptions(), degrade=("samples", "judge"))
    assert result.degraded == []  # n is 1 and no judge is configured


def test_the_server_degrades_answers_under_load(sampled: Pipeline) -> None:
    with TestClient(create_app(pipeline=sampled)) as http:
        state = server_state(http)
        calm = http.post("/v1/ask", json={"question": QUESTION}).json()
        assert calm["degraded"] == []
        state.degrader.recent_wait_s = 60.0  # as after questions that waited a minute for a slot
        loaded = http.post("/v1/ask", json={"question": QUESTION}).json()
        assert loaded["degraded"] == ["samples"], loaded
        grounded = http.post(
            "/v1/chat/completions",
            json={"model": "ragguard", "messages": [{"role": "user", "content": QUESTION}]},
        )
        assert grounded.status_code == 200, grounded.text
        assert grounded.json()["ragguard"]["degraded"] == ["samples"]
        metrics = http.get("/metrics").text
        assert 'ragguard:degraded_answers_total{step="samples"} 2.0' in metrics
