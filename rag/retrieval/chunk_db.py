"""The SQLite half of an index: ``chunks.sqlite``, the source of truth.

It holds the metadata (``meta``), the documents and their chunks with each chunk's embedding.
The FAISS file (``rag.retrieval.faiss_store``) and the BM25 folder (``rag.retrieval.lexical``) are
caches rebuilt from the batches these functions read. The connection autocommits every statement
run outside ``transaction``; the caller (``rag.retrieval.index``) holds the lock.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from rag.retrieval.documents import Chunk, Document
from rag.retrieval.records import DocumentInfo, ScoredChunk

DB_FILE = "chunks.sqlite"
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
_DOCUMENT_COLUMNS = "doc_id, content_hash, num_chunks, metadata, ingested_at"
_BATCH = 20_000


def connect(path: Path) -> sqlite3.Connection:
    """The index folder's database (created with its tables when missing), in autocommit mode."""
    conn = sqlite3.connect(path / DB_FILE, check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.executescript(_SCHEMA)
    return conn


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction (taking the write lock up front) on an autocommit connection."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def has_metadata(path: Path) -> bool:
    """Whether the database in ``path`` holds committed metadata (its creation finished)."""
    conn = sqlite3.connect(path / DB_FILE)
    try:
        return bool(conn.execute("SELECT 1 FROM meta WHERE key = 'format_version'").fetchall())
    except sqlite3.OperationalError:  # no meta table yet
        return False
    finally:
        conn.close()


# ------------------------------------------------------------------- metadata
def read_meta(conn: sqlite3.Connection) -> dict[str, str]:
    return dict(conn.execute("SELECT key, value FROM meta").fetchall())


def stored_generation(conn: sqlite3.Connection) -> str | None:
    """The committed generation, as stored (None before the index's creation committed)."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
    return None if row is None else str(row[0])


def put_meta(conn: sqlite3.Connection, values: dict[str, str]) -> None:
    conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", values.items())


# ------------------------------------------------------------------ documents
def counts(conn: sqlite3.Connection) -> tuple[int, int]:
    """(documents, chunks) the index holds."""
    num_docs, num_chunks = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(num_chunks), 0) FROM documents"
    ).fetchone()
    return int(num_docs), int(num_chunks)


def document(conn: sqlite3.Connection, doc_id: str) -> DocumentInfo | None:
    row = conn.execute(
        f"SELECT {_DOCUMENT_COLUMNS} FROM documents WHERE doc_id = ?", (doc_id,)
    ).fetchone()
    return _document_info(row) if row else None


def documents(conn: sqlite3.Connection, offset: int, limit: int | None) -> list[DocumentInfo]:
    rows = conn.execute(
        f"SELECT {_DOCUMENT_COLUMNS} FROM documents ORDER BY doc_id LIMIT ? OFFSET ?",
        (-1 if limit is None else limit, offset),
    ).fetchall()
    return [_document_info(r) for r in rows]


def _document_info(row: tuple[Any, ...]) -> DocumentInfo:
    return DocumentInfo(row[0], row[1], int(row[2]), json.loads(row[3]), float(row[4]))


def delete_rows(conn: sqlite3.Connection, doc_id: str) -> list[int]:
    """Delete a document and its chunks; the row ids of the chunks deleted."""
    ids = [r[0] for r in conn.execute("SELECT id FROM chunks WHERE doc_id = ?", (doc_id,))]
    conn.execute("DELETE FROM chunks WHERE doc_id = ?", (doc_id,))
    conn.execute("DELETE FROM documents WHERE doc_id = ?", (doc_id,))
    return ids


def insert_rows(
    conn: sqlite3.Connection, document: Document, chunks: list[Chunk], vectors: np.ndarray
) -> list[tuple[int, np.ndarray]]:
    """Insert a document and its chunks; (row id, vector) of each chunk."""
    conn.execute(
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
        cursor = conn.execute(
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


# --------------------------------------------------------------------- chunks
def num_vectors(conn: sqlite3.Connection) -> int:
    count: int = conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
    return count


def scored_chunks(
    conn: sqlite3.Connection,
    hits: Sequence[tuple[int, float | None]],
    query: np.ndarray | None = None,
) -> list[ScoredChunk]:
    """The chunks of (row id, score) hits, in the hits' order; a score of None is the
    chunk's cosine similarity to ``query``, from its stored embedding."""
    if not hits:
        return []
    rows = conn.execute(
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


def stored_vectors(
    conn: sqlite3.Connection, dimension: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(row ids, vectors) batches of every stored chunk: what FAISS is rebuilt from."""
    cursor = conn.execute("SELECT id, embedding FROM chunks ORDER BY id")
    while rows := cursor.fetchmany(_BATCH):
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        vectors = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32)
        yield ids, vectors.reshape(len(rows), dimension)


def stored_texts(conn: sqlite3.Connection) -> Iterator[tuple[np.ndarray, list[str]]]:
    """What BM25 searches: each chunk's text after its document's title, when it has one
    (a chunk in the middle of a document rarely repeats what the document is about)."""
    cursor = conn.execute(
        "SELECT c.id, c.text, json_extract(d.metadata, '$.title') FROM chunks c "
        "JOIN documents d USING (doc_id) ORDER BY c.id"
    )
    while rows := cursor.fetchmany(_BATCH):
        ids = np.fromiter((r[0] for r in rows), np.int64, len(rows))
        yield ids, [f"{r[2]}\n{r[1]}" if isinstance(r[2], str) else r[1] for r in rows]


def stored_titles(conn: sqlite3.Connection) -> Iterator[tuple[str, int]]:
    """Each titled document's title and the row id of its first chunk."""
    rows = conn.execute(
        "SELECT json_extract(d.metadata, '$.title'), c.id FROM documents d "
        "JOIN chunks c USING (doc_id) WHERE c.ordinal = 0"
    )
    return ((title, row) for title, row in rows if isinstance(title, str))


def titled_texts(conn: sqlite3.Connection, ids: Sequence[int]) -> list[tuple[str | None, str]]:
    """(document title, text) of the chunks ``ids``, in that order."""
    if not ids:
        return []
    rows = conn.execute(
        "SELECT c.id, json_extract(d.metadata, '$.title'), c.text FROM chunks c "
        f"JOIN documents d USING (doc_id) WHERE c.id IN ({','.join('?' * len(ids))})",
        list(ids),
    ).fetchall()
    by_id = {r[0]: (r[1] if isinstance(r[1], str) else None, r[2]) for r in rows}
    return [by_id[i] for i in ids if i in by_id]
