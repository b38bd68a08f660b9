"""The pipeline's collaborators are injected: a caller's retrieve stage and checker are the ones
that run, and an app closes a pipeline only when it is handed it to own (real FAISS and guards;
the fake embedder and generator)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from guards import Guard, GuardContext, GuardResult, Outcome
from rag.pipeline import Pipeline
from rag.retrieval.collection import CollectionRegistry
from rag.settings import Settings
from rag.stages import RetrieveStage
from rag.stages.check import AnswerChecker
from rag.types import AskOptions
from tests.fakes import HashingEmbedder, ScriptedGenerator

QUESTION = "How does speculative decoding use a draft model?"


class Marker(Guard):
    """A guard that passes every answer and says so, so a test can see its checker ran."""

    name = "marker"

    def check(self, ctx: GuardContext) -> GuardResult:
        return GuardResult(self.name, Outcome.PASS, 1.0, "the injected checker ran")


def test_an_injected_retriever_and_checker_are_the_ones_asked(
    settings: Settings, fake_demo_index_template: Path
) -> None:
    shutil.copytree(fake_demo_index_template, settings.retrieval.index_dir / "demo")
    embedder = HashingEmbedder()
    retriever = RetrieveStage(CollectionRegistry.from_settings(settings, embedder))
    checker = AnswerChecker(settings, embedder)
    checker.chain.guards.append(Marker())
    pipeline = Pipeline(
        settings, embedder, ScriptedGenerator(), retriever=retriever, checker=checker
    )
    try:
        assert pipeline.retriever is retriever and pipeline.collections is retriever.collections
        result = pipeline.ask_with(QUESTION, AskOptions(min_score=-1.0, top_k=3))
        assert result.passages and result.passages[0].doc_id.startswith("speculative-decoding")
        marker = [r for r in result.guard_results if r.name == "marker"]
        assert [r.reason for r in marker] == ["the injected checker ran"]
    finally:
        pipeline.close()


def test_guards_disabled_means_no_checker_even_when_one_is_given(
    settings: Settings, fake_demo_index_template: Path
) -> None:
    shutil.copytree(fake_demo_index_template, settings.retrieval.index_dir / "demo")
    embedder = HashingEmbedder()
    off = settings.updated(**{"guards_enabled": False})
    pipeline = Pipeline(off, embedder, ScriptedGenerator(), checker=AnswerChecker(off, embedder))
    try:
        assert pipeline.checker is None
        result = pipeline.ask_with(QUESTION, AskOptions(min_score=-1.0, top_k=3))
        assert result.confidence is None and not result.guard_results
    finally:
        pipeline.close()


def test_an_app_given_its_pipeline_to_own_closes_it_at_shutdown(
    fake_pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi.testclient import TestClient

    from rag.server import create_app

    closed: list[bool] = []
    close = fake_pipeline.close

    def recorded_close() -> None:
        closed.append(True)
        close()

    monkeypatch.setattr(fake_pipeline, "close", recorded_close)
    with TestClient(create_app(pipeline=fake_pipeline)) as client:  # the caller's: kept open
        assert client.get("/healthz").status_code == 200
    assert closed == []
    with TestClient(create_app(pipeline=fake_pipeline, owns_pipeline=True)) as client:
        response = client.post("/v1/ask", json={"question": QUESTION, "min_score": -1.0})
        assert response.status_code == 200
    assert closed == [True]  # what a Ray Serve replica's app does when the replica stops
