"""faiss-gpu search agrees with the CPU search. Skipped without a GPU build of faiss."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rag.retrieval.documents import Chunk, Document
from rag.retrieval.faiss_store import gpu_available
from rag.retrieval.index import VectorIndex

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(
    not gpu_available(), reason="faiss has no GPU support here (install the gpu extra)"
)
def test_faiss_gpu_search_matches_cpu(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((500, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = VectorIndex.create(tmp_path / "ix", embedding_model="m", dimension=16)
    chunks = [Chunk(f"d#{i}", "d", i, str(i)) for i in range(500)]
    index.write([(Document("d", "t"), chunks, vectors)])
    hits = index.search(vectors[42], 5)
    assert index._vectors._gpu_index is not None, "the search did not run on the GPU copy"
    assert hits[0].chunk.chunk_id == "d#42"
    cpu = vectors @ vectors[42]
    assert [h.chunk.ordinal for h in hits] == list(np.argsort(-cpu)[:5])
