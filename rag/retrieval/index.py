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
"""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from rag.atomic import atomic_write_bytes
from rag.errors import IndexMismatchError, IndexNotFoundError, InvalidInputError
from rag.retrieval.documents import Chunk, Document
from rag.retrieval.faiss_store import FaissStore
from rag.retrieval.fusion import reciprocal_rank_fusion
from rag.retrieval.lexical import LexicalStore
from rag.retrieval.records import DocumentInfo, IndexInfo, ScoredChunk
from rag.retrieval.title_links import TitleLinks
from rag.types import RETRIEVAL_MODES, RetrievalMode

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
INDEX_TYPES = ("flat", "hnsw")
FUSION_DEPTH = 50
"""Hybrid search fuses this many hits (at least ``top_k``) of each of dense and BM25 search."""
LINK_SOURCES = 3
"""Hybrid search follows the title links of this many of its best passages
(``rag.retrieval.title_links``)."""
_DB_FILE = "chunks.sqlite"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    doc_id TEXT PRIMARY KEY,
    content_hash TEXT NOT NULL,
    metadata TEXT NOT NULL,
    num_chunks INTEGER NOT NULL,
    ingested_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    chunk_id TEXT NOT NULL UNIQUE,
    doc_id TEXT NOT NULL REFERENCES documents(doc_id) ON DELETE CASCADE,
    ordinal INTEGER NOT NULL,
    text TEXT NOT NULL,
    embedding BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_by_doc ON chunks(doc_id);
"""


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction (taking the write lock up front) on an autocommit connection."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def delete_index(path: Path) -> None:
    """Remove an index folder. The database goes first, so a crash half-way leaves no index."""
    if not VectorIndex.exists(path):
        raise IndexNotFoundError(f"no index at {path}")
    for name in (_DB_FILE, _DB_FILE + "-wal", _DB_FILE + "-shm"):
        (path / name).unlink(missing_ok=True)
    shutil.rmtree(path)


class VectorIndex:
    """One named index on disk. Thread-safe: writes and searches are serialised by a lock."""

    def __init__(self, path: Path, conn: sqlite3.Connection, meta: dict[str, str]):
        self.path = path
        self._conn = conn
        self._meta = meta
        self._lock = threading.RLock()
        self._vectors = FaissStore(path, self.dimension, meta["index_type"], self._stored_vectors)
        self._vectors.load(self.generation, self._num_stored_vectors())
        self._lexical = LexicalStore(path, self._stored_texts, self._num_stored_vectors)
        self._links = TitleLinks(self._stored_titles)

    # ----------------------------------------------------------------- opening
    @classmethod
    def exists(cls, path: Path) -> bool:
        return (path / _DB_FILE).is_file()

    @classmethod
    def is_complete(cls, path: Path) -> bool:
        """Whether the index's creation committed (a crash inside ``create`` leaves a database
        without metadata, which ``create`` may then take over)."""
        if not cls.exists(path):
            return False
        conn = sqlite3.connect(path / _DB_FILE)
        try:
            return bool(conn.execute("SELECT 1 FROM meta WHERE key = 'format_version'").fetchall())
        except sqlite3.OperationalError:  # no meta table yet
            return False
        finally:
            conn.close()

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
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        if "format_version" not in meta:
            conn.close()
            raise IndexNotFoundError(f"the index at {path} was never completely created; delete it")
        if int(meta["format_version"]) != FORMAT_VERSION:
            conn.close()
            raise IndexMismatchError(
                f"index {path.name} has format version {meta['format_version']}; "
                f"this ragguard reads version {FORMAT_VERSION}: rebuild it"
            )
        built_with = meta["embedding_model"]
        if embedding_model is not None and built_with != embedding_model:
            conn.close()
            raise IndexMismatchError(
                f"index {path.name} was built with embedding model {built_with!r}, but "
                f"{embedding_model!r} is configured: use that model or rebuild the index"
            )
        if dimension is not None and int(meta["dimension"]) != dimension:
            conn.close()
            raise IndexMismatchError(
                f"index {path.name} holds {meta['dimension']}-dimensional vectors; "
                f"the configured embedding model produces {dimension}"
            )
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
        if index_type not in INDEX_TYPES:
            raise InvalidInputError(f"index_type must be one of {INDEX_TYPES}, got {index_type!r}")
        if cls.is_complete(path):
            raise InvalidInputError(f"an index already exists at {path}")
        path.mkdir(parents=True, exist_ok=True)
        conn = cls._connect(path)
        now = time.time()
        meta = {
            "format_version": str(FORMAT_VERSION),
            "embedding_model": embedding_model,
            "dimension": str(dimension),
            "index_type": index_type,
            "chunk_size": str(chunk_size),
            "chunk_overlap": str(chunk_overlap),
            "generation": "0",
            "created_at": repr(now),
            "updated_at": repr(now),
        }
        with _transaction(conn):  # the connection autocommits every statement without one
            conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta.items())
        index = cls(path, conn, meta)
        index._write_manifest()
        return index

    @staticmethod
    def _connect(path: Path) -> sqlite3.Connection:
        conn = sqlite3.connect(path / _DB_FILE, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.executescript(_SCHEMA)
        return conn

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
            num_docs, num_chunks = self._conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(num_chunks), 0) FROM documents"
            ).fetchone()
        m = self._meta
        return IndexInfo(
            name=self.name,
            format_version=int(m["format_version"]),
            embedding_model=m["embedding_model"],
            dimension=int(m["dimension"]),
            index_type=m["index_type"],
            chunk_size=int(m["chunk_size"]),
            chunk_overlap=int(m["chunk_overlap"]),
            num_documents=int(num_docs),
            num_chunks=int(num_chunks),
            generation=int(m["generation"]),
            created_at=float(m["created_at"]),
            updated_at=float(m["updated_at"]),
        )

    def document(self, doc_id: str) -> DocumentInfo | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT doc_id, content_hash, num_chunks, metadata, ingested_at FROM documents "
                "WHERE doc_id = ?",
                (doc_id,),
            ).fetchone()
        return self._document_info(row) if row else None

    def documents(self, *, offset: int = 0, limit: int | None = None) -> list[DocumentInfo]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT doc_id, content_hash, num_chunks, metadata, ingested_at FROM documents "
                "ORDER BY doc_id LIMIT ? OFFSET ?",
                (-1 if limit is None else limit, offset),
            ).fetchall()
        return [self._document_info(r) for r in rows]

    @staticmethod
    def _document_info(row: tuple[Any, ...]) -> DocumentInfo:
        return DocumentInfo(row[0], row[1], int(row[2]), json.loads(row[3]), float(row[4]))

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
        name by title (``hybrid``). Each hit's ``score`` is its cosine similarity to the query
        vector in every mode, so one relevance threshold holds."""
        if query.shape != (self.dimension,):
            raise InvalidInputError(f"query vector must have shape ({self.dimension},)")
        if mode not in RETRIEVAL_MODES:
            raise InvalidInputError(f"mode must be one of {RETRIEVAL_MODES}, got {mode!r}")
        if mode != "dense" and not (text and text.strip()):
            raise InvalidInputError(f"{mode} search needs the query's text")
        with self._lock:
            self._catch_up()
            if mode == "dense":
                return self._chunks(self._vectors.search(query, top_k))
            depth = max(top_k, FUSION_DEPTH) if mode == "hybrid" else top_k
            assert text is not None
            ranked = [i for i, _ in self._lexical.search(text, depth, self.generation)]
            if mode == "hybrid":
                ranked = self._hybrid(query, ranked, depth)
            return self._chunks([(i, None) for i in ranked[:top_k]], query)

    def _hybrid(self, query: np.ndarray, lexical: list[int], depth: int) -> list[int]:
        """Dense and BM25 rankings fused by reciprocal rank, then fused again with the documents
        the best ``LINK_SOURCES`` passages name by title (their first chunks, in reading order)."""
        dense = [i for i, _ in self._vectors.search(query, depth)]
        fused = reciprocal_rank_fusion([dense, lexical])
        sources = self._titled_texts(fused[:LINK_SOURCES])
        linked = self._links.follow(sources, self.generation)
        return reciprocal_rank_fusion([dense, lexical, linked]) if linked else fused

    def _chunks(
        self, hits: Sequence[tuple[int, float | None]], query: np.ndarray | None = None
    ) -> list[ScoredChunk]:
        """The chunks of (row id, score) hits, in the hits' order; a score of None is the
        chunk's cosine similarity to ``query``, from its stored embedding."""
        if not hits:
            return []
        rows = self._conn.execute(
            "SELECT c.id, c.chunk_id, c.doc_id, c.ordinal, c.text, d.metadata, c.embedding "
            f"FROM chunks c JOIN documents d USING (doc_id) "
            f"WHERE c.id IN ({','.join('?' * len(hits))})",
            [i for i, _ in hits],
        ).fetchall()
        by_id = {r[0]: r for r in rows}
        found = []
        for i, score in hits:
            if (r := by_id.get(i)) is None:
                continue
            if score is None:
                assert query is not None
                score = float(np.frombuffer(r[6], dtype=np.float32) @ query)
            found.append(ScoredChunk(Chunk(r[1], r[2], r[3], r[4]), score, json.loads(r[5])))
        return found

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
            with _transaction(self._conn):
                self._catch_up()  # the write lock is held: nobody else can commit meanwhile
                for doc_id in deletes:
                    removed_ids += self._delete_rows(doc_id)
                for document, chunks, vectors in upserts:
                    removed_ids += self._delete_rows(document.doc_id)
                    added += self._insert_rows(document, chunks, vectors)
                generation = self.generation + 1
                now = time.time()
                self._conn.executemany(
                    "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                    [("generation", str(generation)), ("updated_at", repr(now))],
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
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        if row is not None and row[0] != self._meta["generation"]:
            logger.info(
                "index %s: generation %s was written elsewhere; reloading", self.name, row[0]
            )
            self._meta = dict(self._conn.execute("SELECT key, value FROM meta").fetchall())
            self._vectors.load(self.generation, self._num_stored_vectors())

    def _num_stored_vectors(self) -> int:
        count: int = self._conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        return count

    def _delete_rows(self, doc_id: str) -> list[int]:
        ids = [
            r[0] for r in self._conn.execute("SELECT id FROM chunks WHERE doc_id = ?", (doc_id,))
        ]
        self._conn.execute("DELETE FROM chunks WHERE doc_id = ?", (doc_id,))
        self._conn.execute("DELETE FROM documents WHERE doc_id = ?", (doc_id,))
        return ids

    def _insert_rows(
        self, document: Document, chunks: list[Chunk], vectors: np.ndarray
    ) -> list[tuple[int, np.ndarray]]:
        self._conn.execute(
            "INSERT INTO documents VALUES (?, ?, ?, ?, ?)",
            (
                document.doc_id,
                document.content_hash,
                json.dumps(document.metadata, default=str),
                len(chunks),
                time.time(),
            ),
        )
        added = []
        for chunk, vector in zip(chunks, vectors, strict=True):
            cursor = self._conn.execute(
                "INSERT INTO chunks (chunk_id, doc_id, ordinal, text, embedding) "
                "VALUES (?, ?, ?, ?, ?)",
                (
                    chunk.chunk_id,
                    chunk.doc_id,
                    chunk.ordinal,
                    chunk.text,
                    vector.astype(np.float32).tobytes(),
                ),
            )
            assert cursor.lastrowid is not None
            added.append((cursor.lastrowid, vector))
        return added

    def _stored_vectors(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        cursor = self._conn.execute("SELECT id, embedding FROM chunks ORDER BY id")
        while rows := cursor.fetchmany(20_000):
            ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            vectors = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32)
            yield ids, vectors.reshape(len(rows), self.dimension)

    def _stored_texts(self) -> Iterator[tuple[np.ndarray, list[str]]]:
        """What BM25 searches: each chunk's text after its document's title, when it has one
        (a chunk in the middle of a document rarely repeats what the document is about)."""
        cursor = self._conn.execute(
            "SELECT c.id, c.text, json_extract(d.metadata, '$.title') FROM chunks c "
            "JOIN documents d USING (doc_id) ORDER BY c.id"
        )
        while rows := cursor.fetchmany(20_000):
            ids = np.fromiter((r[0] for r in rows), np.int64, len(rows))
            yield ids, [f"{r[2]}\n{r[1]}" if isinstance(r[2], str) else r[1] for r in rows]

    def _stored_titles(self) -> Iterator[tuple[str, int]]:
        """Each titled document's title and the row id of its first chunk."""
        rows = self._conn.execute(
            "SELECT json_extract(d.metadata, '$.title'), c.id FROM documents d "
            "JOIN chunks c USING (doc_id) WHERE c.ordinal = 0"
        )
        return ((title, row) for title, row in rows if isinstance(title, str))

    def _titled_texts(self, ids: Sequence[int]) -> list[tuple[str | None, str]]:
        """(document title, text) of the chunks ``ids``, in that order."""
        if not ids:
            return []
        rows = self._conn.execute(
            "SELECT c.id, json_extract(d.metadata, '$.title'), c.text FROM chunks c "
            f"JOIN documents d USING (doc_id) WHERE c.id IN ({','.join('?' * len(ids))})",
            list(ids),
        ).fetchall()
        by_id = {r[0]: (r[1] if isinstance(r[1], str) else None, r[2]) for r in rows}
        return [by_id[i] for i in ids if i in by_id]

    def _write_manifest(self) -> None:
        """A readable copy of the metadata; derived, so failing to write it is only logged."""
        manifest = asdict(self.info())
        try:
            atomic_write_bytes(self.path / "manifest.json", json.dumps(manifest, indent=2).encode())
        except OSError:
            logger.warning("index %s: could not write manifest.json", self.name, exc_info=True)
