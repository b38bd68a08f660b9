"""Ingestion through the real embedder into a real index."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from rag.errors import (
    DocumentNotFoundError,
    IndexMismatchError,
    IndexNotFoundError,
    InvalidInputError,
)
from rag.retrieval.collection import CollectionRegistry, CommitPolicy
from rag.retrieval.documents import Document
from rag.retrieval.embed import Embedder
from rag.retrieval.index import VectorIndex

if TYPE_CHECKING:
    from rag.pipeline import Pipeline

FACTS = {
    "kv": "A KV cache stores attention keys and values so they are not recomputed.",
    "paris": "Paris is the capital of France and lies on the Seine.",
    "moon": "The Moon orbits the Earth roughly every 27 days.",
}


def registry(path: Path, embedder: Embedder) -> CollectionRegistry:
    return CollectionRegistry(path, embedder, chunk_size=64, chunk_overlap=8)


def test_ingest_skips_unchanged_replaces_changed_and_survives_restart(
    tmp_path: Path, embedder: Embedder
) -> None:
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


def test_delete_then_reingest(tmp_path: Path, embedder: Embedder) -> None:
    collection = registry(tmp_path, embedder).get("kb", create=True)
    collection.ingest([Document(k, v) for k, v in FACTS.items()])
    collection.delete("moon")
    assert all(h.chunk.doc_id != "moon" for h in collection.search("Moon orbit", 3))
    with pytest.raises(DocumentNotFoundError, match="moon"):
        collection.delete("moon")
    assert collection.ingest([Document("moon", FACTS["moon"])]).added == ["moon"]
    assert collection.search("How long does the Moon take to orbit?", 1)[0].chunk.doc_id == "moon"


def test_unknown_and_invalid_index_names(tmp_path: Path, embedder: Embedder) -> None:
    reg = registry(tmp_path, embedder)
    with pytest.raises(IndexNotFoundError, match="ragguard ingest"):
        reg.get("missing")
    with pytest.raises(InvalidInputError, match="invalid index name"):
        reg.get("../escape", create=True)


def test_index_built_with_another_embedding_model_is_refused(
    tmp_path: Path, embedder: Embedder
) -> None:
    VectorIndex.create(
        tmp_path / "old", embedding_model="bge-small", dimension=embedder.dimension
    ).close()
    with pytest.raises(IndexMismatchError, match="bge-small"):
        registry(tmp_path, embedder).get("old")


def test_an_interrupted_first_demo_build_is_completed(pipeline: Pipeline) -> None:
    from rag.demo import ensure_demo_index

    pipeline.collections.get("demo", create=True)  # created, then "killed" before ingesting
    assert ensure_demo_index(pipeline.collections)
    assert pipeline.collections.get("demo").info().num_documents >= 20
    assert not ensure_demo_index(pipeline.collections)


class _EmbedderThatDies(Embedder):
    """The session embedder, but embedding fails once ``texts_left`` texts are used up (a crash
    mid-ingestion); counts the texts it embedded."""

    def __init__(self, inner: Embedder, texts_left: float) -> None:
        # Not Embedder.__init__: the model is inner's, already loaded.
        self.inner = inner
        self.model_id, self.dimension = inner.model_id, inner.dimension
        self.max_seq_length = inner.max_seq_length
        self.texts_left = texts_left
        self.embedded = 0

    def tokenize(self, text: str) -> list[int]:
        return self.inner.tokenize(text)

    def embed(
        self, texts: list[str], *, batch_size: int = 64, show_progress: bool = False
    ) -> np.ndarray:
        if len(texts) > self.texts_left:
            raise RuntimeError("killed mid-ingestion")
        self.texts_left -= len(texts)
        self.embedded += len(texts)
        return self.inner.embed(texts, batch_size=batch_size, show_progress=show_progress)


def test_an_interrupted_ingestion_keeps_its_committed_groups_and_the_rerun_skips_them(
    tmp_path: Path, embedder: Embedder
) -> None:
    import faiss

    docs = [
        Document(f"d{i:02d}", f"Fact number {i:02d} is about topic {i:02d}.") for i in range(12)
    ]
    policy = CommitPolicy(max_chunks=3, max_seconds=math.inf, max_commit_share=0.0)
    dying = _EmbedderThatDies(embedder, texts_left=7)  # dies inside the third group of three
    reg = CollectionRegistry(tmp_path, dying, chunk_size=64, chunk_overlap=8, commit_policy=policy)
    with pytest.raises(RuntimeError, match="killed"):
        reg.get("kb", create=True).ingest(docs)
    reg.close()

    index = VectorIndex.open(tmp_path / "kb")
    assert [d.doc_id for d in index.documents()] == ["d00", "d01", "d02", "d03", "d04", "d05"]
    assert index.generation == 2  # one commit per group
    # The FAISS file of the committed generation holds exactly the committed chunks.
    vectors = faiss.read_index(str(tmp_path / "kb" / f"vectors-{index.generation}.faiss"))
    assert isinstance(vectors, faiss.IndexIDMap)
    stored = faiss.vector_to_array(vectors.id_map)
    conn = sqlite3.connect(tmp_path / "kb" / "chunks.sqlite")
    assert sorted(stored.tolist()) == [
        r[0] for r in conn.execute("SELECT id FROM chunks ORDER BY id")
    ]
    conn.close()
    index.close()

    counting = _EmbedderThatDies(embedder, texts_left=math.inf)
    rerun = CollectionRegistry(tmp_path, counting, chunk_size=64, chunk_overlap=8)
    report = rerun.get("kb").ingest(docs)
    assert len(report.skipped) == 6 and len(report.added) == 6
    assert counting.embedded == 6  # only what the crash lost is embedded again
    assert rerun.get("kb").info().num_documents == 12
    rerun.close()


def test_commit_groups_are_bounded_by_chunks_by_time_and_by_the_cost_of_a_commit() -> None:
    policy = CommitPolicy(max_chunks=1000, max_seconds=10.0, max_commit_share=0.05)
    assert not policy.is_due(999, embed_s=9.9, last_commit_s=0.0)
    assert policy.is_due(1000, embed_s=0.1, last_commit_s=0.0)  # enough chunks
    assert policy.is_due(10, embed_s=10.0, last_commit_s=0.0)  # or enough time
    # A commit that took 1 s waits for 20 s of embedding (5%), past max_chunks if need be.
    assert not policy.is_due(5000, embed_s=19.9, last_commit_s=1.0)
    assert policy.is_due(5000, embed_s=20.0, last_commit_s=1.0)

    untimed = CommitPolicy(max_chunks=4096, max_seconds=math.inf, max_commit_share=0.0)
    assert not untimed.is_due(4095, embed_s=1e9, last_commit_s=100.0)
    assert untimed.is_due(4096, embed_s=0.0, last_commit_s=100.0)
    with pytest.raises(InvalidInputError, match="commit policy"):
        CommitPolicy(max_chunks=0)


def test_commit_groups_come_from_the_settings(embedder: Embedder) -> None:
    from rag.settings import Settings

    settings = Settings(
        ingest_group_chunks=7, ingest_group_s=2.5, ingest_max_commit_share=0.1, _env_file=None
    )
    registry = CollectionRegistry.from_settings(settings, embedder)
    assert registry.commit_policy == CommitPolicy(7, 2.5, 0.1)


def test_an_index_whose_creation_was_interrupted_is_created_again(
    tmp_path: Path, embedder: Embedder
) -> None:
    (tmp_path / "kb").mkdir()
    VectorIndex._connect(tmp_path / "kb").close()  # killed before the metadata was committed
    reg = registry(tmp_path, embedder)
    with pytest.raises(IndexNotFoundError, match="never completely created"):
        reg.get("kb")
    assert reg.get("kb", create=True).ingest([Document("kv", FACTS["kv"])]).added == ["kv"]
    reg.close()
    assert registry(tmp_path, embedder).get("kb").info().num_documents == 1


def test_a_group_is_committed_once_it_took_max_seconds_to_embed(
    tmp_path: Path, embedder: Embedder
) -> None:
    docs = [
        Document(f"d{i:02d}", f"Fact number {i:02d} is about topic {i:02d}.") for i in range(12)
    ]
    policy = CommitPolicy(max_chunks=1000, max_seconds=1e-9, max_commit_share=0.0)
    reg = CollectionRegistry(
        tmp_path, embedder, chunk_size=64, chunk_overlap=8, embed_batch_size=2, commit_policy=policy
    )
    collection = reg.get("kb", create=True)
    assert collection.ingest(docs).num_chunks == 12
    # Far fewer chunks than max_chunks, but every group that embedded something is due.
    assert 2 <= collection.info().generation <= 4 and collection.info().num_documents == 12
    reg.close()
