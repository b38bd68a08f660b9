"""Ingestion through the real embedder into a real index."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag.collection import CollectionRegistry
from rag.documents import Document
from rag.errors import (
    DocumentNotFoundError,
    IndexMismatchError,
    IndexNotFoundError,
    InvalidInputError,
)
from rag.index import VectorIndex

FACTS = {
    "kv": "A KV cache stores attention keys and values so they are not recomputed.",
    "paris": "Paris is the capital of France and lies on the Seine.",
    "moon": "The Moon orbits the Earth roughly every 27 days.",
}


def registry(path: Path, embedder) -> CollectionRegistry:  # type: ignore[no-untyped-def]
    return CollectionRegistry(path, embedder, chunk_size=64, chunk_overlap=8)


def test_ingest_skips_unchanged_replaces_changed_and_survives_restart(
    tmp_path: Path, embedder
) -> None:  # type: ignore[no-untyped-def]
    reg = registry(tmp_path, embedder)
    collection = reg.get("kb", create=True)
    report = collection.ingest([Document(k, v) for k, v in FACTS.items()])
    assert sorted(report.added) == ["kv", "moon", "paris"] and report.num_chunks == 3

    again = collection.ingest(
        [Document("kv", FACTS["kv"]), Document("paris", "Lyon is in France.")]
    )
    assert again.skipped == ["kv"] and again.updated == ["paris"] and again.num_chunks == 1
    assert (
        collection.search("Which city is the capital of France?", 1)[0].chunk.text != FACTS["paris"]
    )
    reg.close()

    reopened = registry(tmp_path, embedder).get("kb")
    assert reopened.info().num_documents == 3
    hit = reopened.search("What does a KV cache avoid?", 1)[0]
    assert hit.chunk.doc_id == "kv" and hit.score > 0.5


def test_delete_then_reingest(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    collection = registry(tmp_path, embedder).get("kb", create=True)
    collection.ingest([Document(k, v) for k, v in FACTS.items()])
    collection.delete("moon")
    assert all(h.chunk.doc_id != "moon" for h in collection.search("Moon orbit", 3))
    with pytest.raises(DocumentNotFoundError, match="moon"):
        collection.delete("moon")
    assert collection.ingest([Document("moon", FACTS["moon"])]).added == ["moon"]
    assert collection.search("How long does the Moon take to orbit?", 1)[0].chunk.doc_id == "moon"


def test_unknown_and_invalid_index_names(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    reg = registry(tmp_path, embedder)
    with pytest.raises(IndexNotFoundError, match="ragguard ingest"):
        reg.get("missing")
    with pytest.raises(InvalidInputError, match="invalid index name"):
        reg.get("../escape", create=True)


def test_index_built_with_another_embedding_model_is_refused(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    VectorIndex.create(
        tmp_path / "old", embedding_model="bge-small", dimension=embedder.dimension
    ).close()
    with pytest.raises(IndexMismatchError, match="bge-small"):
        registry(tmp_path, embedder).get("old")


def test_an_interrupted_first_demo_build_is_completed(pipeline) -> None:  # type: ignore[no-untyped-def]
    from rag.server.state import ensure_demo_index

    pipeline.collections.get("demo", create=True)  # created, then "killed" before ingesting
    assert ensure_demo_index(pipeline)
    assert pipeline.collections.get("demo").info().num_documents >= 20
    assert not ensure_demo_index(pipeline)
