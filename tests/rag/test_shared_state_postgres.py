"""Two app instances (as two replicas would be) over one PostgreSQL database holding both the
review store and the API keys: a key made on one works on the other, answers queued by both land
in one queue, reviewers claiming through both apps at once never get the same item, and every
claim and resolution is in the audit log. The fakes stand in for the models."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rag.pipeline import Pipeline
from rag.server import create_app
from rag.server.auth import KeyStore, Role
from rag.settings import Settings
from tests.fakes import HashingEmbedder, ScriptedGenerator
from tests.postgres import new_database

QUESTIONS = [
    "What does a KV cache avoid recomputing?",
    "What is prefix caching?",
    "What does continuous batching do?",
    "What is self-consistency voting?",
    "What does the repetition guard detect?",
    "How are reviewers' ratings scored?",
]


@pytest.fixture
def apps(
    postgres_url: str, tmp_path: Path, fake_demo_index_template: Path
) -> Iterator[tuple[list[TestClient], str]]:
    database = new_database(postgres_url)
    admin = KeyStore(database)
    admin_key = admin.create("ops", Role.ADMIN)
    admin.close()
    clients, pipelines = [], []
    for i in range(2):
        settings = Settings(
            index_dir=tmp_path / f"indexes-{i}",
            data_dir=tmp_path / f"data-{i}",  # nothing shared through the filesystem
            review_db=database,
            keys_db=database,
            review_gold_rate=0.0,
            _env_file=None,
        )
        shutil.copytree(fake_demo_index_template, settings.retrieval.index_dir / "demo")
        pipeline = Pipeline(settings, HashingEmbedder(), ScriptedGenerator())
        pipelines.append(pipeline)
        client = TestClient(create_app(settings, pipeline=pipeline))
        clients.append(client.__enter__())
    yield clients, admin_key
    for client in clients:
        client.__exit__(None, None, None)
    for pipeline in pipelines:
        pipeline.close()


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def test_two_apps_share_one_queue_and_one_key_store(apps: tuple[list[TestClient], str]) -> None:
    (first, second), admin_key = apps
    # Keys made through one app work on the other.
    app_key = first.post("/v1/keys", json={"name": "web", "role": "app"}, headers=bearer(admin_key))
    assert app_key.status_code == 201, app_key.text
    reviewers = {}
    for name in ("ann", "bob", "cat", "dan"):
        made = second.post(
            "/v1/keys", json={"name": name, "role": "reviewer"}, headers=bearer(admin_key)
        )
        assert made.status_code == 201, made.text
        reviewers[name] = made.json()["key"]
    listed = first.get("/v1/keys", headers=bearer(admin_key)).json()
    assert {k["name"] for k in listed} >= {"ops", "web", "ann", "bob", "cat", "dan"}

    # Answers queued through both apps land in one queue.
    queued = set()
    for i, question in enumerate(QUESTIONS * 2):
        client = (first, second)[i % 2]
        body = {
            "question": f"{question} ({i})",
            "min_score": -1.0,
            "abstain_below": 0.0,
            "review_below": 1.0,
        }
        answer = client.post("/v1/ask", json=body, headers=bearer(app_key.json()["key"]))
        assert answer.status_code == 200, answer.text
        assert answer.json()["decision"] == "review"
        queued.add(answer.json()["review_id"])
    assert len(queued) == len(QUESTIONS) * 2
    listing = second.get("/v1/reviews", params={"limit": 100}, headers=bearer(admin_key)).json()
    assert {item["id"] for item in listing["items"]} == queued

    # Four reviewers claim through both apps at once: no item twice, every item once.
    claimed: dict[str, list[str]] = {name: [] for name in reviewers}
    errors: list[BaseException] = []

    def review(name: str, client: TestClient) -> None:
        try:
            while True:
                got = client.post("/v1/reviews/next", headers=bearer(reviewers[name]))
                assert got.status_code == 200, got.text
                if got.json() is None:
                    return
                item_id = got.json()["id"]
                claimed[name].append(item_id)
                done = client.post(
                    f"/v1/reviews/{item_id}/resolve",
                    json={"action": "approve"},
                    headers=bearer(reviewers[name]),
                )
                assert done.status_code == 200, done.text
        except BaseException as exc:  # raised in the test thread below
            errors.append(exc)

    threads = [
        threading.Thread(target=review, args=(name, (first, second)[i % 2]))
        for i, name in enumerate(reviewers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    everything = [item for items in claimed.values() for item in items]
    assert sorted(everything) == sorted(queued)  # each item claimed exactly once

    # The audit log is complete: each item's claim and resolution, by whoever claimed it.
    for name, items in claimed.items():
        for item_id in items:
            item = first.get(f"/v1/reviews/{item_id}", headers=bearer(admin_key)).json()
            assert item["status"] == "approved"
            actions = [(a["actor"], a["action"]) for a in item["audit"]]
            assert (name, "claim") in actions and (name, "approve") in actions, actions
