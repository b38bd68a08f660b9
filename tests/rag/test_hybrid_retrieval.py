"""BM25 and hybrid search over a real index: ranking, cosine scores, persistence, adds and deletes."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from rag.errors import InvalidInputError
from rag.retrieval.documents import Chunk, Document
from rag.retrieval.fusion import reciprocal_rank_fusion
from rag.retrieval.index import VectorIndex

DIM = 8
TEXTS = {
    "kv": "A KV cache keeps the keys and values of earlier tokens so attention need not "
    "recompute them.",
    "faiss": "FAISS searches dense vectors by inner product; HNSW trades exactness for speed.",
    "tour": "Egan Bernal won the 2019 Tour de France, the first Colombian to do so.",
    "moon": "The Moon orbits the Earth in about 27 days.",
}
SEEDS = {doc_id: seed for seed, doc_id in enumerate(TEXTS)}


def unit(seed: int) -> np.ndarray:
    vector = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return vector / np.linalg.norm(vector)


def write(index: VectorIndex, doc_id: str, text: str, seed: int) -> None:
    chunk = Chunk(f"{doc_id}#0", doc_id, 0, text)
    index.write([(Document(doc_id, text), [chunk], unit(seed)[None, :])])


@pytest.fixture
def index(tmp_path: Path) -> VectorIndex:
    index = VectorIndex.create(tmp_path / "ix", embedding_model="test-model", dimension=DIM)
    for doc_id, text in TEXTS.items():
        write(index, doc_id, text, SEEDS[doc_id])
    return index


def test_rrf_sums_reciprocal_ranks() -> None:
    # b is second in both rankings and beats a and c, each first in one ranking only and absent
    # from the other; ties keep the order first seen.
    assert reciprocal_rank_fusion([["a", "b"], ["c", "b"]], k=1) == ["b", "a", "c"]
    assert reciprocal_rank_fusion([["x", "y"], []]) == ["x", "y"]
    assert reciprocal_rank_fusion([]) == []
    with pytest.raises(ValueError):
        reciprocal_rank_fusion([["a"]], k=-1)


def test_bm25_ranks_by_words_and_scores_by_cosine(index: VectorIndex) -> None:
    query = unit(0)  # the vector of "kv": a dense search would put it first
    hits = index.search(query, 2, text="Who won the Tour de France in 2019?", mode="bm25")
    assert [h.chunk.doc_id for h in hits] == ["tour"]  # no other chunk shares a word
    assert hits[0].score == pytest.approx(float(unit(2) @ query), abs=1e-5)
    assert index.search(query, 3, mode="dense")[0].chunk.doc_id == "kv"


def test_hybrid_fuses_dense_and_bm25(index: VectorIndex) -> None:
    query = unit(0)
    hits = index.search(query, 4, text="Tour de France winner", mode="hybrid")
    ids = [h.chunk.doc_id for h in hits]
    # First in both rankings' fusion: the dense best (kv) and the only BM25 hit (tour).
    assert set(ids[:2]) == {"kv", "tour"} and len(ids) == 4
    assert hits[0].score == pytest.approx(float(unit(SEEDS[ids[0]]) @ query), abs=1e-5)


def test_bm25_follows_adds_and_deletes(index: VectorIndex) -> None:
    query = unit(9)
    assert index.search(query, 3, text="Moon orbit", mode="bm25")[0].chunk.doc_id == "moon"
    index.delete("moon")
    assert index.search(query, 3, text="Moon orbit", mode="bm25") == []
    write(index, "mars", "Mars orbits the Sun in 687 days; its moons are Phobos and Deimos.", 7)
    assert [h.chunk.doc_id for h in index.search(query, 3, text="moons of Mars", mode="bm25")] == [
        "mars"
    ]
    # Only the current generation's folder is kept.
    folders = sorted(p.name for p in index.path.glob("bm25-*"))
    assert folders == [f"bm25-{index.generation}"]


def test_saved_bm25_is_loaded_on_reopen_and_rebuilt_when_damaged(
    index: VectorIndex, caplog: pytest.LogCaptureFixture
) -> None:
    path = index.path
    first = index.search(unit(1), 2, text="dense vectors", mode="bm25")
    index.close()
    caplog.set_level(logging.INFO, logger="rag.retrieval.lexical")
    reopened = VectorIndex.open(path)
    assert reopened.search(unit(1), 2, text="dense vectors", mode="bm25") == first
    assert "building BM25" not in caplog.text  # read from bm25-<generation>/
    reopened.close()

    (path / f"bm25-{reopened.generation}" / "ids.npy").write_bytes(b"not numpy")
    again = VectorIndex.open(path)
    assert again.search(unit(1), 2, text="dense vectors", mode="bm25") == first
    assert "building BM25" in caplog.text


def test_another_process_write_is_seen(index: VectorIndex) -> None:
    other = VectorIndex.open(index.path)
    assert index.search(unit(0), 2, text="Phobos", mode="bm25") == []
    write(other, "mars", "Phobos is the larger moon of Mars.", 7)
    assert index.search(unit(0), 2, text="Phobos", mode="bm25")[0].chunk.doc_id == "mars"
    other.close()


def test_empty_index_stop_words_and_bad_mode(tmp_path: Path) -> None:
    empty = VectorIndex.create(tmp_path / "e", embedding_model="m", dimension=DIM)
    assert empty.search(unit(0), 3, text="anything", mode="hybrid") == []
    write(empty, "a", "Some text about retrieval.", 1)
    assert empty.search(unit(0), 3, text="the of and a", mode="bm25") == []
    with pytest.raises(InvalidInputError, match="text"):
        empty.search(unit(0), 3, mode="bm25")
    with pytest.raises(InvalidInputError, match="mode"):
        empty.search(unit(0), 3, text="x", mode="sparse")  # type: ignore[arg-type]
