"""Feedback and risk control over HTTP (TestClient, real pipeline stages with the scripted
generator): thumbs on an answer by its id with every role, through the SDK's request shapes
and the grounded OpenAI response id; the per-collection status and a refit by hand; /metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest
from fastapi.testclient import TestClient

from guards import Policy
from guards.review import NewItem, Resolution
from rag.server import create_app
from tests.server_state import review_store, server_state

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from rag.pipeline import Pipeline

QUESTION = "What does a KV cache avoid recomputing?"


@pytest.fixture
def client(fake_pipeline: Pipeline) -> Iterator[TestClient]:
    assert fake_pipeline.checker is not None
    fake_pipeline.checker.policy = Policy(abstain_below=0.0, review_below=0.0)  # all answered
    with TestClient(create_app(pipeline=fake_pipeline)) as http:
        yield http


def test_feedback_on_an_answer_with_every_role(client: TestClient) -> None:
    made = client.post("/v1/keys", json={"name": "root", "role": "admin"}).json()["key"]
    admin = {"authorization": f"Bearer {made}"}
    keys = {
        role: client.post("/v1/keys", headers=admin, json={"name": role, "role": role}).json()[
            "key"
        ]
        for role in ("app", "reviewer")
    }
    app = {"x-api-key": keys["app"]}
    reviewer = {"x-api-key": keys["reviewer"]}
    answered = client.post("/v1/ask", headers=app, json={"question": QUESTION}).json()
    assert answered["decision"] == "answer"
    answer_id = answered["request_id"]
    path = f"/v1/answers/{answer_id}/feedback"

    assert client.post(path, json={"rating": "up"}).status_code == 401
    refused = client.post(path, headers=reviewer, json={"rating": "up"})
    assert refused.status_code == 403 and "needs app" in refused.json()["detail"]
    up = client.post(path, headers=app, json={"rating": "up", "comment": "spot on"})
    assert up.status_code == 201, up.text
    assert up.json()["answer_id"] == answer_id and up.json()["by"] == "app"
    assert up.json()["index"] == "demo" and up.json()["comment"] == "spot on"
    down = client.post(path, headers=admin, json={"rating": "down"})
    assert down.status_code == 201 and down.json()["by"] == "root"

    for body, code in [
        ({"rating": "sideways"}, 422),
        ({"rating": "up", "comment": "x" * 2001}, 422),
        ({}, 422),
    ]:
        assert client.post(path, headers=app, json=body).status_code == code
    missing = client.post("/v1/answers/nope/feedback", headers=app, json={"rating": "up"})
    assert missing.status_code == 404 and "no answer has id" in missing.json()["detail"]

    store = review_store(client)
    assert [f.helpful for f in store.labels.feedback(answer_id)] == [True, False]
    assert store.labels.labels("demo", "smollm2-135m") == []  # feedback is never a label
    metrics = client.get("/metrics").text
    assert 'ragguard:feedback_total{index="demo",rating="up"} 1.0' in metrics
    assert 'ragguard:feedback_total{index="demo",rating="down"} 1.0' in metrics


def test_feedback_by_a_grounded_openai_response_id(client: TestClient) -> None:
    response = client.post(
        "/v1/chat/completions",
        json={"model": "ragguard", "messages": [{"role": "user", "content": QUESTION}]},
    ).json()
    assert response["id"].startswith("chatcmpl-")
    assert response["id"] == "chatcmpl-" + response["ragguard"]["request_id"]
    given = client.post(f"/v1/answers/{response['id']}/feedback", json={"rating": "down"})
    assert (
        given.status_code == 201 and given.json()["answer_id"] == response["ragguard"]["request_id"]
    )


def test_the_risk_status_a_refit_by_hand_and_the_metrics(client: TestClient) -> None:
    store = review_store(client)
    assert client.get("/v1/reviews/risk/collections").json() == []
    for i in range(30):
        item = store.add(
            NewItem(f"q{i}?", "a [1].", confidence=0.8, shipped_confidence=0.8,
                    signals={"grounding": 0.3 if i % 3 else -0.3}, index_name="demo",
                    profile="smollm2-135m")
        )  # fmt: skip
        store.claim(item.id, "ann")
        store.resolve(item.id, "ann", Resolution.APPROVE if i % 3 else Resolution.REJECT)
    (row,) = client.get("/v1/reviews/risk/collections").json()
    assert row["index"] == "demo" and row["labels"] == 30 and row["calibration_version"] == 0
    assert "threshold" not in row  # no target risk is set
    # 30 new labels >= calibrate_every (25): that read started a refit in the background.
    pipeline = server_state(client).pipeline
    assert pipeline is not None
    pipeline.risk.wait_for_refits(timeout=60)
    assert len(store.calibrations.history("demo", "smollm2-135m")) == 1
    refit = client.post("/v1/reviews/risk/collections/demo/refit")
    assert refit.status_code == 200, refit.text
    report = refit.json()
    assert report["labels"] == 30 and report["version"] == 2 and report["reason"]
    if report["accepted"]:
        assert report["status"]["calibration_version"] == 2
    metrics = client.get("/metrics").text
    assert 'ragguard:risk_labels{index="demo",profile="smollm2-135m"} 30.0' in metrics
    unknown = client.post("/v1/reviews/risk/collections/nowhere/refit")
    assert unknown.status_code == 404 and "no reviewer labels" in unknown.json()["detail"]


def test_the_sdk_gives_feedback_and_reads_the_risk_status(
    fake_pipeline: Pipeline, live_server: Callable[[ASGIApp], str]
) -> None:
    from rag.client import AsyncClient, Client
    from rag.errors import NotFoundError

    assert fake_pipeline.checker is not None
    fake_pipeline.checker.policy = Policy(abstain_below=0.0, review_below=0.0)
    url = str(live_server(create_app(pipeline=fake_pipeline)))
    with Client(url) as client:
        result = client.ask(QUESTION)
        given = client.feedback(result.request_id, "down", comment="wrong year")
        assert given["rating"] == "down" and given["comment"] == "wrong year"
        with pytest.raises(NotFoundError, match="no answer has id 'unknown'"):
            client.feedback("unknown", "up")
        (status,) = client.risk_status()  # the collection asked, with its feedback
        assert status["labels"] == 0 and status["feedback_unhelpful"] == 1  # no reviewer label
        with pytest.raises(NotFoundError, match="no reviewer labels"):
            client.refit_calibration("demo")

    async def in_async() -> dict[str, Any]:
        async with AsyncClient(url) as client:
            return await client.feedback(result.request_id, "up")

    assert asyncio.run(in_async())["rating"] == "up"
