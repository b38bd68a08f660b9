"""The BM25 half of an index: bm25s over the chunks' text, one saved folder per generation.

Like the FAISS file (``rag.retrieval.faiss_store``) this is a cache of the SQLite database,
rebuilt from the stored texts whenever it is missing, unreadable or of an older generation. It is
built on the first BM25 or hybrid search after a change rather than on every commit, so an index
that is only searched densely never pays for it. bm25s indexes are static (no adds or deletes),
so a change means a rebuild: 0.5 s per 10,000 chunks and 4.7 s per 100,000 here
(``benchmarks/retrieval.py``).

Layout: ``bm25-<gen>/`` holds bm25s's files plus ``ids.npy``, the chunk row id of each of its
documents. A folder is written under a temporary name and renamed into place, so a crash leaves
either a complete folder or none.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from rag.errors import MissingDependencyError

logger = logging.getLogger(__name__)

TextBatches = Callable[[], Iterator[tuple[np.ndarray, list[str]]]]
"""Yields (ids int64[n], texts) batches of every stored chunk."""

_IDS_FILE = "ids.npy"
_PREFIX = "bm25-"


def _import_bm25s() -> tuple[Any, Any]:
    try:
        import bm25s
        import Stemmer
    except ImportError as exc:
        raise MissingDependencyError(
            "BM25 retrieval needs bm25s and PyStemmer: pip install bm25s PyStemmer"
        ) from exc
    return bm25s, Stemmer.Stemmer("english")


class LexicalStore:
    """Owns the BM25 index of one vector index folder. Not thread-safe: the caller locks."""

    def __init__(self, folder: Path, texts: TextBatches, count: Callable[[], int]):
        """``count``: how many chunks the database holds now (read only when loading)."""
        self.folder = folder
        self._texts = texts
        self._count = count
        self._generation: int | None = None  # the generation ``_bm25`` was built from
        self._bm25: Any = None
        self._ids = np.zeros(0, dtype=np.int64)
        self._stemmer: Any = None

    def folder_of(self, generation: int) -> Path:
        return self.folder / f"{_PREFIX}{generation}"

    def search(self, query: str, top_k: int, generation: int) -> list[tuple[int, float]]:
        """(chunk row id, BM25 score) of the ``top_k`` best chunks with a query word, best first.

        ``generation`` is the database's now; a store built from another generation is loaded
        or rebuilt first."""
        self._ensure(generation)
        if not len(self._ids):
            return []
        bm25s, stemmer = _import_bm25s()
        tokens = bm25s.tokenize(
            [query], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False
        )
        if not tokens[0]:
            return []  # only stop words, or no word of two letters or more
        docs, scores = self._bm25.retrieve(
            tokens, k=min(top_k, len(self._ids)), show_progress=False, n_threads=1
        )
        return [
            (int(self._ids[d]), float(s)) for d, s in zip(docs[0], scores[0], strict=True) if s > 0
        ]

    def _ensure(self, generation: int) -> None:
        if self._generation == generation:
            return
        if not self._load(generation, self._count()):
            logger.info("%s: building BM25 generation %d", self.folder, generation)
            self._build()
            self._persist(generation)
        self._generation = generation

    def _load(self, generation: int, num_chunks: int) -> bool:
        folder = self.folder_of(generation)
        if not (folder / _IDS_FILE).is_file():
            return False
        bm25s, _ = _import_bm25s()
        try:
            ids = np.load(folder / _IDS_FILE)
            bm25 = bm25s.BM25.load(str(folder), show_progress=False) if len(ids) else None
        except (OSError, ValueError, KeyError):
            logger.warning("%s: %s is unreadable", self.folder, folder.name, exc_info=True)
            return False
        if len(ids) != num_chunks:
            return False
        self._bm25, self._ids = bm25, ids
        return True

    def _build(self) -> None:
        bm25s, stemmer = _import_bm25s()
        ids: list[np.ndarray] = []
        texts: list[str] = []
        for batch_ids, batch_texts in self._texts():
            ids.append(batch_ids)
            texts += batch_texts
        self._ids = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
        self._bm25 = None
        if texts:
            tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
            self._bm25 = bm25s.BM25()
            self._bm25.index(tokens, show_progress=False)

    def _persist(self, generation: int) -> None:
        """Write ``bm25-<generation>/`` (temporary folder, then rename); drop older ones.
        Failing to write is only logged: the store in memory is complete."""
        target = self.folder_of(generation)
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=self.folder))
            if self._bm25 is not None:
                self._bm25.save(str(tmp), show_progress=False)
            np.save(tmp / _IDS_FILE, self._ids)
            try:
                tmp.rename(target)
            except OSError:  # another process saved this generation first: keep theirs
                shutil.rmtree(tmp, ignore_errors=True)
        except OSError:
            logger.warning("%s: could not save %s", self.folder, target.name, exc_info=True)
            return
        for stale in self.folder.glob(f"{_PREFIX}*"):
            if stale.name != target.name:
                shutil.rmtree(stale, ignore_errors=True)
        for leftover in self.folder.glob(f".{_PREFIX}*"):  # a crash mid-write left these
            if not leftover.name.startswith(f".{target.name}."):
                shutil.rmtree(leftover, ignore_errors=True)
