"""The FAISS half of an index: one in-memory FAISS index, its per-generation file, GPU search.

The SQLite database (``rag.retrieval.chunk_db``) is the source of truth; this store is a cache of
its vectors that can always be rebuilt from it. Ids are the database's chunk row ids.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from rag.atomic import atomic_write
from rag.errors import MissingDependencyError

logger = logging.getLogger(__name__)

RowBatches = Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]
"""Yields (ids int64[n], vectors float32[n, dim]) batches of every stored vector."""


def import_faiss() -> Any:
    """The faiss module, or an error saying which package provides it."""
    try:
        import faiss
    except ImportError as exc:
        raise MissingDependencyError(
            "FAISS is not installed: pip install 'ragguard[cpu]' (faiss-cpu) or "
            "'ragguard[gpu]' (faiss-gpu on a CUDA machine)"
        ) from exc
    return faiss


def gpu_available() -> bool:
    """True when this faiss build has GPU support and sees a GPU (the faiss-gpu wheel)."""
    faiss = import_faiss()

    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


class FaissStore:
    """Owns the FAISS index of one vector index folder."""

    def __init__(self, folder: Path, dimension: int, index_type: str, rows: RowBatches):
        self.folder = folder
        self.dimension = dimension
        self.index_type = index_type
        self._rows = rows
        self._index: Any = None
        self._gpu_index: Any = None  # a search copy on the GPU, dropped on every change
        self._use_gpu = index_type == "flat" and gpu_available()  # faiss has no GPU HNSW

    @property
    def num_vectors(self) -> int:
        return int(self._index.ntotal)

    def file(self, generation: int) -> Path:
        return self.folder / f"vectors-{generation}.faiss"

    def load(self, generation: int, num_vectors: int) -> None:
        """Read the file of ``generation``; rebuild it from the database when it is missing,
        unreadable, or does not hold ``num_vectors`` vectors."""
        faiss = import_faiss()

        file = self.file(generation)
        try:
            index = faiss.read_index(str(file)) if file.is_file() else None
        except RuntimeError:
            logger.warning("%s: %s is unreadable", self.folder, file.name, exc_info=True)
            index = None
        self._gpu_index = None
        if index is not None and index.ntotal == num_vectors:
            self._index = index
            return
        logger.info("%s: rebuilding FAISS generation %d from the database", self.folder, generation)
        self.rebuild()
        try:
            self.persist(generation)
        except OSError:  # a read-only folder: search from memory, the next writer saves it
            logger.warning("%s: cannot save FAISS generation %d", self.folder, generation)

    def rebuild(self) -> None:
        """Fill a fresh FAISS index from every stored vector."""
        index = self._new_index()
        for ids, vectors in self._rows():
            index.add_with_ids(vectors, ids)
        self._index = index
        self._gpu_index = None

    def apply(self, removed_ids: list[int], added: list[tuple[int, np.ndarray]]) -> None:
        """Mirror a committed database change."""
        self._gpu_index = None
        if removed_ids:
            if self.index_type == "hnsw":  # HNSW cannot remove vectors: rebuild (deletes are rare)
                self.rebuild()
                return
            self._index.remove_ids(np.asarray(removed_ids, dtype=np.int64))
        if added:
            ids = np.asarray([i for i, _ in added], dtype=np.int64)
            self._index.add_with_ids(np.stack([v for _, v in added]).astype(np.float32), ids)

    def persist(self, generation: int) -> None:
        """Write the file of ``generation`` atomically, then drop older generations' files."""
        faiss = import_faiss()

        current = self.file(generation)
        # Straight to the file: serialising to bytes first copies the index twice in memory.
        atomic_write(current, lambda tmp: faiss.write_index(self._index, str(tmp)))
        for stale in self.folder.glob("vectors-*.faiss"):
            if stale.name != current.name:
                stale.unlink(missing_ok=True)

    def search(self, query: np.ndarray, top_k: int) -> list[tuple[int, float]]:
        """(id, inner product) of the ``top_k`` nearest vectors, best first."""
        if self._index.ntotal == 0:
            return []
        scores, ids = self._search_index().search(query[None, :].astype(np.float32), top_k)
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0], strict=True) if i >= 0]

    def _search_index(self) -> Any:
        if not self._use_gpu:
            return self._index
        if self._gpu_index is None:
            faiss = import_faiss()

            self._gpu_index = faiss.index_cpu_to_all_gpus(self._index)
        return self._gpu_index

    def _new_index(self) -> Any:
        faiss = import_faiss()

        inner: Any
        if self.index_type == "hnsw":
            inner = faiss.IndexHNSWFlat(self.dimension, 32, faiss.METRIC_INNER_PRODUCT)
            inner.hnsw.efSearch = 128
            inner.hnsw.efConstruction = 80
        else:
            inner = faiss.IndexFlatIP(self.dimension)
        return faiss.IndexIDMap2(inner)
