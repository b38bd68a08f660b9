"""Choosing dense, BM25 or hybrid retrieval: by setting and per request, over HTTP and the SDK
types, on the demo collection (real FAISS and bm25s; the fake embedder and generator)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient

from rag.server import create_app
from rag.settings import Settings
from rag.types import AskOptions

if TYPE_CHECKING:
    from rag.pipeline import Pipeline

QUESTION = "How does speculative decoding use a draft model?"


@pytest.fixture
def client(fake_pipeline: Pipeline) -> Iterator[TestClient]:
    with TestClient(create_app(pipeline=fake_pipeline)) as http:
        yield http


def ask(client: TestClient, **body: object) -> list[str]:
    response = client.post("/v1/ask", json={"question": QUESTION, "min_score": -1.0, **body})
    assert response.status_code == 200, response.text
    return [p["doc_id"] for p in response.json()["passages"]]


def bm25_built(pipeline: Pipeline) -> bool:
    """Whether a BM25 search has run on the demo index (it saves ``bm25-<generation>/``)."""
    return any((pipeline.settings.retrieval.index_dir / "demo").glob("bm25-*"))


def test_each_mode_answers_and_the_request_chooses(
    client: TestClient, fake_pipeline: Pipeline
) -> None:
    dense = ask(client, retrieval="dense", top_k=3)
    assert len(dense) == 3 and not bm25_built(fake_pipeline)
    for mode in ("bm25", "hybrid"):
        found = ask(client, retrieval=mode, top_k=3)
        assert found[0].startswith("speculative-decoding") and len(found) == 3
    assert bm25_built(fake_pipeline)


def test_an_unknown_mode_is_a_422(client: TestClient) -> None:
    response = client.post("/v1/ask", json={"question": QUESTION, "retrieval": "sparse"})
    assert response.status_code == 422 and response.json()["error"] == "invalid_request"


def test_the_setting_is_the_default_and_a_request_overrides_it(fake_pipeline: Pipeline) -> None:
    options = AskOptions(min_score=-1.0, top_k=3)
    fake_pipeline.ask_with(QUESTION, options)
    assert not bm25_built(fake_pipeline)  # the default setting: dense
    fake_pipeline.settings = fake_pipeline.settings.updated(**{"retrieval": "bm25"})
    by_setting = fake_pipeline.ask_with(QUESTION, options)
    assert bm25_built(fake_pipeline)
    assert by_setting.passages[0].doc_id.startswith("speculative-decoding")
    for folder in (fake_pipeline.settings.retrieval.index_dir / "demo").glob("bm25-*"):
        shutil.rmtree(folder)
    fake_pipeline.retriever.collections.close()  # reopened: the BM25 store in memory goes too
    fake_pipeline.ask_with(QUESTION, replace(options, retrieval="dense"))
    assert not bm25_built(fake_pipeline)


def test_the_setting_refuses_an_unknown_mode() -> None:
    with pytest.raises(ValueError, match="retrieval"):
        Settings(retrieval="sparse", _env_file=None)
