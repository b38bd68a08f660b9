"""A persisted vector index: FAISS for search, SQLite for chunks, crash-safe on every write.

Layout of ``indexes/<name>/``::

    chunks.sqlite           documents, chunks (text + embedding) and metadata: the source of truth
    vectors-<gen>.faiss     FAISS index for generation <gen> of the database (a rebuildable cache)
    bm25-<gen>/             BM25 index (bm25s) of generation <gen>, once a BM25 or hybrid search
                            has run (a rebuildable cache too: ``rag.retrieval.lexical``)
    manifest.json           a readable summary of the metadata, rewritten after every commit

Every write is one SQLite transaction that also bumps the generation; the FAISS file of the new
generation is then written to a temporary file and renamed into place. A crash at any point leaves
either the old or the new generation committed; if the FAISS file of the committed generation is
missing, opening the index rebuilds it from the stored embeddings.

``VectorIndex`` ties the parts together under one lock: the database (``chunk_db``), the metadata
and manifest (``index_format``), FAISS (``faiss_store``), BM25 (``lexical``), title links
(``title_links``) and how each retrieval mode ranks with them (``search_modes``).
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from rag.errors import IndexNotFoundError, InvalidInputError
from rag.retrieval import chunk_db, index_format, search_modes
from rag.retrieval.documents import Chunk, Document
from rag.retrieval.faiss_store import FaissStore
from rag.retrieval.lexical import LexicalStore
from rag.retrieval.records import DocumentInfo, IndexInfo, ScoredChunk
from rag.retrieval.title_links import TitleLinks
from rag.types import RETRIEVAL_MODES, RetrievalMode

logger = logging.getLogger(__name__)


def delete_index(path: Path) -> None:
    """Remove an index folder. The database goes first, so a crash half-way leaves no index."""
    if not VectorIndex.exists(path):
        raise IndexNotFoundError(f"no index at {path}")
    for name in (chunk_db.DB_FILE, chunk_db.DB_FILE + "-wal", chunk_db.DB_FILE + "-shm"):
        (path / name).unlink(missing_ok=True)
    shutil.rmtree(path)


class VectorIndex:
    """One named index on disk. Thread-safe: writes and searches are serialised by a lock."""

    def __init__(self, path: Path, conn: sqlite3.Connection, meta: dict[str, str]):
        self.path = path
        self._conn = conn
        self._meta = meta
        self._lock = threading.RLock()
        self._vectors = FaissStore(
            path,
            self.dimension,
            meta["index_type"],
            lambda: chunk_db.stored_vectors(conn, self.dimension),
        )
        self._vectors.load(self.generation, self._num_stored_vectors())
        self._lexical = LexicalStore(
            path, lambda: chunk_db.stored_texts(conn), self._num_stored_vectors
        )
        self._links = TitleLinks(lambda: chunk_db.stored_titles(conn))

    # ----------------------------------------------------------------- opening
    @classmethod
    def exists(cls, path: Path) -> bool:
        return (path / chunk_db.DB_FILE).is_file()

    @classmethod
    def is_complete(cls, path: Path) -> bool:
        """Whether the index's creation committed (a crash inside ``create`` leaves a database
        without metadata, which ``create`` may then take over)."""
        return cls.exists(path) and chunk_db.has_metadata(path)

    @classmethod
    def open(
        cls, path: Path, *, embedding_model: str | None = None, dimension: int | None = None
    ) -> VectorIndex:
        """Open a built index; with ``embedding_model`` set, refuse one built with another."""
        if not cls.exists(path):
            raise IndexNotFoundError(
                f"no index at {path}: build it with `ragguard ingest PATH --index {path.name}`"
            )
        conn = cls._connect(path)
        meta = chunk_db.read_meta(conn)
        try:
            index_format.check(path, meta, embedding_model, dimension)
        except BaseException:
            conn.close()
            raise
        return cls(path, conn, meta)

    @classmethod
    def create(
        cls,
        path: Path,
        *,
        embedding_model: str,
        dimension: int,
        index_type: str = "flat",
        chunk_size: int = 256,
        chunk_overlap: int = 32,
    ) -> VectorIndex:
        """Create an empty index (the metadata is written in one transaction), or complete one
        whose creation was interrupted."""
        index_format.check_index_type(index_type)
        if cls.is_complete(path):
            raise InvalidInputError(f"an index already exists at {path}")
        path.mkdir(parents=True, exist_ok=True)
        conn = cls._connect(path)
        meta = index_format.new_meta(
            embedding_model, dimension, index_type, chunk_size, chunk_overlap, time.time()
        )
        with chunk_db.transaction(conn):  # the connection autocommits every statement without one
            chunk_db.put_meta(conn, meta)
        index = cls(path, conn, meta)
        index._write_manifest()
        return index

    @staticmethod
    def _connect(path: Path) -> sqlite3.Connection:
        return chunk_db.connect(path)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # ------------------------------------------------------------------ reads
    @property
    def name(self) -> str:
        return self.path.name

    @property
    def embedding_model(self) -> str:
        return self._meta["embedding_model"]

    @property
    def dimension(self) -> int:
        return int(self._meta["dimension"])

    @property
    def generation(self) -> int:
        """Bumped by every committed write: a version for caches keyed on index content."""
        return int(self._meta["generation"])

    def info(self) -> IndexInfo:
        with self._lock:
            num_docs, num_chunks = chunk_db.counts(self._conn)
        return index_format.info_of(self.name, self._meta, num_docs, num_chunks)

    def document(self, doc_id: str) -> DocumentInfo | None:
        with self._lock:
            return chunk_db.document(self._conn, doc_id)

    def documents(self, *, offset: int = 0, limit: int | None = None) -> list[DocumentInfo]:
        with self._lock:
            return chunk_db.documents(self._conn, offset, limit)

    def search(
        self,
        query: np.ndarray,
        top_k: int,
        *,
        text: str | None = None,
        mode: RetrievalMode = "dense",
    ) -> list[ScoredChunk]:
        """The ``top_k`` best chunks for a normalised query vector, best first.

        ``mode`` ranks them by the vector (``dense``), by BM25 over ``text``, the query's words
        (``bm25``), or by both fused by reciprocal rank with the documents their best passages
        name by title (``hybrid``; see ``rag.retrieval.search_modes``). Each hit's ``score`` is
        its cosine similarity to the query vector in every mode, so one relevance threshold
        holds."""
        if query.shape != (self.dimension,):
            raise InvalidInputError(f"query vector must have shape ({self.dimension},)")
        if mode not in RETRIEVAL_MODES:
            raise InvalidInputError(f"mode must be one of {RETRIEVAL_MODES}, got {mode!r}")
        if mode != "dense" and not (text and text.strip()):
            raise InvalidInputError(f"{mode} search needs the query's text")
        with self._lock:
            self._catch_up()
            hits = search_modes.rank(
                mode,
                query,
                text,
                top_k,
                self.generation,
                vectors=self._vectors,
                lexical=self._lexical,
                links=self._links,
                titled_texts=lambda ids: chunk_db.titled_texts(self._conn, ids),
            )
            return chunk_db.scored_chunks(self._conn, hits, query)

    # ----------------------------------------------------------------- writes
    def write(
        self,
        upserts: Sequence[tuple[Document, list[Chunk], np.ndarray]] = (),
        deletes: Iterable[str] = (),
    ) -> None:
        """Atomically replace/insert documents (with their chunks and vectors) and delete others."""
        for document, chunks, vectors in upserts:
            if vectors.shape != (len(chunks), self.dimension):
                raise InvalidInputError(
                    f"document {document.doc_id}: {len(chunks)} chunks need vectors of shape "
                    f"({len(chunks)}, {self.dimension}), got {vectors.shape}"
                )
        with self._lock:
            removed_ids: list[int] = []
            added: list[tuple[int, np.ndarray]] = []
            with chunk_db.transaction(self._conn):
                self._catch_up()  # the write lock is held: nobody else can commit meanwhile
                for doc_id in deletes:
                    removed_ids += chunk_db.delete_rows(self._conn, doc_id)
                for document, chunks, vectors in upserts:
                    removed_ids += chunk_db.delete_rows(self._conn, document.doc_id)
                    added += self._insert_rows(document, chunks, vectors)
                generation = self.generation + 1
                now = time.time()
                chunk_db.put_meta(
                    self._conn, {"generation": str(generation), "updated_at": repr(now)}
                )
            self._meta.update(generation=str(generation), updated_at=repr(now))
            try:
                self._vectors.apply(removed_ids, added)
                self._vectors.persist(generation)
            except BaseException:
                # The database is committed; bring the in-memory index back in line with it.
                logger.exception(
                    "index %s: FAISS update failed; rebuilding from the database", self.name
                )
                self._vectors.rebuild()
                raise
            self._write_manifest()

    def delete(self, doc_id: str) -> bool:
        """Delete one document; False when it was not there."""
        with self._lock:
            if self.document(doc_id) is None:
                return False
            self.write(deletes=[doc_id])
            return True

    def _catch_up(self) -> None:
        """Reload metadata and vectors if another process committed since we last looked."""
        stored = chunk_db.stored_generation(self._conn)
        if stored is not None and stored != self._meta["generation"]:
            logger.info(
                "index %s: generation %s was written elsewhere; reloading", self.name, stored
            )
            self._meta = chunk_db.read_meta(self._conn)
            self._vectors.load(self.generation, self._num_stored_vectors())

    def _num_stored_vectors(self) -> int:
        return chunk_db.num_vectors(self._conn)

    def _insert_rows(
        self, document: Document, chunks: list[Chunk], vectors: np.ndarray
    ) -> list[tuple[int, np.ndarray]]:
        return chunk_db.insert_rows(self._conn, document, chunks, vectors)

    def _write_manifest(self) -> None:
        index_format.write_manifest(self.path, self.info())
