"""A collection: one vector index plus the embedder and chunker that fill it."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from rag.errors import (
    DocumentNotFoundError,
    IndexNotFoundError,
    InvalidInputError,
    ReadOnlyIndexError,
)
from rag.retrieval.documents import Chunk, Chunker, Document
from rag.retrieval.embed import Embedder
from rag.retrieval.index import VectorIndex
from rag.retrieval.records import DocumentInfo, IndexInfo, ScoredChunk
from rag.settings import Settings
from rag.types import RetrievalMode

logger = logging.getLogger(__name__)

INDEX_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
"""What an index name may be (the HTTP API's schema states it too)."""
_INDEX_NAME = re.compile(INDEX_NAME_PATTERN)


def check_index_name(name: str) -> str:
    """Index names become folder names: letters, digits, '_', '.', '-'; at most 64."""
    if not _INDEX_NAME.fullmatch(name):  # match() would let a trailing newline through
        raise InvalidInputError(
            f"invalid index name {name!r}: use 1-64 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )
    return name


def built_indexes(index_dir: Path) -> list[str]:
    """Names of the indexes built under ``index_dir`` (none when it does not exist)."""
    if not index_dir.is_dir():
        return []
    return sorted(p.name for p in index_dir.iterdir() if VectorIndex.exists(p))


@dataclass(frozen=True, slots=True)
class CommitPolicy:
    """When ingestion commits. Documents are embedded a batch at a time and committed in groups,
    each one atomic write (SQLite rows and the FAISS file of the new generation): a crash loses
    at most the group in progress, and a rerun skips the documents already committed.

    A group is committed once it holds ``max_chunks`` chunks or took ``max_seconds`` to embed,
    whichever comes first. Every commit rewrites the whole FAISS file, which grows with the
    index; so a group also waits until its commit costs at most ``max_commit_share`` of its
    embedding time, judged by the previous commit.
    """

    max_chunks: int = 1024
    max_seconds: float = 10.0
    max_commit_share: float = 0.05

    def __post_init__(self) -> None:
        if self.max_chunks < 1 or not self.max_seconds > 0 or not 0 <= self.max_commit_share < 1:
            raise InvalidInputError(
                "a commit policy needs max_chunks >= 1, max_seconds > 0 and "
                "0 <= max_commit_share < 1"
            )

    @classmethod
    def from_settings(cls, settings: Settings) -> CommitPolicy:
        return cls(
            settings.retrieval.ingest_group_chunks,
            settings.retrieval.ingest_group_s,
            settings.retrieval.ingest_max_commit_share,
        )

    def is_due(self, num_chunks: int, embed_s: float, last_commit_s: float) -> bool:
        """Whether to commit a group of ``num_chunks`` chunks that took ``embed_s`` to embed,
        when the previous commit took ``last_commit_s`` (0 before the first)."""
        if self.max_commit_share > 0 and embed_s * self.max_commit_share < last_commit_s:
            return False
        return num_chunks >= self.max_chunks or embed_s >= self.max_seconds


@dataclass(slots=True)
class IngestReport:
    """What one ingestion did."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    num_chunks: int = 0
    elapsed_s: float = 0.0


class Collection:
    """Ingest, delete and search documents of one index."""

    def __init__(
        self,
        index: VectorIndex,
        embedder: Embedder,
        *,
        embed_batch_size: int = 64,
        commit_policy: CommitPolicy | None = None,
        read_only: bool = False,
    ):
        info = index.info()
        self.index = index
        self.embedder = embedder
        self.chunker = Chunker(embedder.tokenize, info.chunk_size, info.chunk_overlap)
        self.embed_batch_size = embed_batch_size
        self.commit_policy = commit_policy or CommitPolicy()
        self.read_only = read_only
        """Refuse ingestion and deletion (the index is written elsewhere, e.g. offline)."""

    @property
    def name(self) -> str:
        return self.index.name

    def info(self) -> IndexInfo:
        return self.index.info()

    def documents(self, *, offset: int = 0, limit: int | None = None) -> list[DocumentInfo]:
        return self.index.documents(offset=offset, limit=limit)

    def ingest(
        self,
        documents: Iterable[Document],
        *,
        show_progress: bool = False,
        commit: CommitPolicy | None = None,
    ) -> IngestReport:
        """Add new documents, replace changed ones, skip unchanged ones.

        Chunks are embedded in batches and committed in groups of documents (``commit``, by
        default the collection's ``commit_policy``); each group is one atomic write, so an
        interrupted ingestion keeps the groups before it and running it again skips them.
        """
        self._check_writable()
        started_all = time.perf_counter()
        report = IngestReport()
        latest = {doc.doc_id: doc for doc in documents}  # a repeated id: the last one wins
        pending: list[tuple[Document, list[Chunk]]] = []
        for doc in latest.values():
            known = self.index.document(doc.doc_id)
            if known is not None and known.content_hash == doc.content_hash:
                report.skipped.append(doc.doc_id)
                continue
            (report.updated if known else report.added).append(doc.doc_id)
            pending.append((doc, self.chunker.split(doc)))
        total = sum(len(chunks) for _, chunks in pending)
        report.num_chunks = total
        # Documents with chunks of similar lengths go together: each embedding batch then holds
        # chunks of similar lengths and pads little, as if all the chunks were sorted at once.
        pending.sort(key=lambda item: -max((len(c.text) for c in item[1]), default=0))
        policy = commit or self.commit_policy
        with tqdm(
            total=total, unit="chunk", desc=f"embedding into {self.name}", disable=not show_progress
        ) as bar:
            group: list[tuple[Document, list[Chunk]]] = []
            waiting: list[Chunk] = []  # chunks of the group not embedded yet
            vectors: dict[Chunk, np.ndarray] = {}
            embed_s = last_commit_s = 0.0
            for position, (doc, chunks) in enumerate(pending):
                group.append((doc, chunks))
                waiting += chunks
                # The group's embedding time, counting the chunks waiting at the pace so far.
                done = len(vectors)
                estimate_s = embed_s * (done + len(waiting)) / done if done else 0.0
                due = position == len(pending) - 1 or policy.is_due(
                    done + len(waiting), estimate_s, last_commit_s
                )
                # The longest waiting chunks, a batch at a time, from at least four batches'
                # worth (so that short last chunks of documents are batched together); every
                # waiting chunk before a commit.
                while waiting and (due or len(waiting) >= 4 * self.embed_batch_size):
                    embed_s += self._embed_longest(waiting, vectors, bar)
                if due:
                    upserts = [(d, c, self._stack(c, vectors)) for d, c in group]
                    started = time.perf_counter()
                    self.index.write(upserts)
                    last_commit_s = time.perf_counter() - started
                    group, embed_s = [], 0.0
        report.elapsed_s = time.perf_counter() - started_all
        return report

    def _embed_longest(
        self, waiting: list[Chunk], vectors: dict[Chunk, np.ndarray], bar: tqdm
    ) -> float:
        """Embed (and remove) the longest ``embed_batch_size`` chunks waiting; seconds taken."""
        started = time.perf_counter()
        waiting.sort(key=lambda chunk: -len(chunk.text))
        batch = waiting[: self.embed_batch_size]
        del waiting[: self.embed_batch_size]
        texts = [chunk.text for chunk in batch]
        vectors.update(zip(batch, self.embedder.embed(texts, batch_size=len(batch)), strict=True))
        bar.update(len(batch))
        return time.perf_counter() - started

    def _stack(self, chunks: list[Chunk], vectors: dict[Chunk, np.ndarray]) -> np.ndarray:
        if not chunks:
            return np.zeros((0, self.embedder.dimension), np.float32)
        return np.stack([vectors.pop(chunk) for chunk in chunks])

    def delete(self, doc_id: str) -> None:
        """Delete a document and its chunks."""
        self._check_writable()
        if not self.index.delete(doc_id):
            raise DocumentNotFoundError(f"document {doc_id!r} is not in index {self.name!r}")

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyIndexError(
                f"index {self.name!r} is served read-only: write it where it is built "
                f"(`ragguard ingest PATH --index {self.name}`); readers follow its new generation"
            )

    def search(self, query: str, top_k: int, *, mode: RetrievalMode = "dense") -> list[ScoredChunk]:
        """The ``top_k`` best chunks for ``query``, ranked as ``mode`` says (``VectorIndex``)."""
        return self.index.search(self.embedder.embed_query(query), top_k, text=query, mode=mode)


class CollectionRegistry:
    """The indexes under one folder, opened lazily and kept open."""

    def __init__(
        self,
        index_dir: Path,
        embedder: Embedder,
        *,
        index_type: str = "flat",
        chunk_size: int = 256,
        chunk_overlap: int = 32,
        embed_batch_size: int = 64,
        commit_policy: CommitPolicy | None = None,
        read_only: bool = False,
    ):
        self.index_dir = index_dir
        self.embedder = embedder
        self.index_type = index_type
        # A chunk longer than the embedder's window would be silently truncated when embedded.
        self.chunk_size = min(chunk_size, embedder.max_seq_length - 2)
        self.chunk_overlap = min(chunk_overlap, self.chunk_size // 2)
        self.embed_batch_size = embed_batch_size
        self.commit_policy = commit_policy or CommitPolicy()
        self.read_only = read_only
        """Open indexes without writing to them: no ingestion, deletion or new index."""
        self._open: dict[str, Collection] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings, embedder: Embedder) -> CollectionRegistry:
        """The registry of ``settings.index_dir``, building new indexes as the settings say."""
        return cls(
            settings.retrieval.index_dir,
            embedder,
            index_type=settings.retrieval.index_type,
            chunk_size=settings.retrieval.chunk_size,
            chunk_overlap=settings.retrieval.chunk_overlap,
            embed_batch_size=settings.retrieval.embed_batch_size,
            commit_policy=CommitPolicy.from_settings(settings),
            read_only=settings.retrieval.read_only_indexes,
        )

    def names(self) -> list[str]:
        """Names of the indexes built under ``index_dir``."""
        return built_indexes(self.index_dir)

    def get(self, name: str, *, create: bool = False) -> Collection:
        """Open a collection; with ``create``, build an empty one when absent."""
        check_index_name(name)
        with self._lock:
            if name in self._open:
                return self._open[name]
            path = self.index_dir / name
            # With ``create``, an index whose creation was interrupted is created again.
            if VectorIndex.exists(path) and not (create and not VectorIndex.is_complete(path)):
                index = VectorIndex.open(
                    path, embedding_model=self.embedder.model_id, dimension=self.embedder.dimension
                )
            elif create and self.read_only:
                raise ReadOnlyIndexError(
                    f"index {name!r} does not exist and indexes are served read-only here: "
                    f"build it with `ragguard ingest PATH --index {name}`"
                )
            elif create:
                index = VectorIndex.create(
                    path,
                    embedding_model=self.embedder.model_id,
                    dimension=self.embedder.dimension,
                    index_type=self.index_type,
                    chunk_size=self.chunk_size,
                    chunk_overlap=self.chunk_overlap,
                )
            else:
                available = ", ".join(self.names()) or "none"
                raise IndexNotFoundError(
                    f"index {name!r} does not exist (available: {available}); "
                    f"build it with `ragguard ingest PATH --index {name}`"
                )
            collection = Collection(
                index,
                self.embedder,
                embed_batch_size=self.embed_batch_size,
                commit_policy=self.commit_policy,
                read_only=self.read_only,
            )
            self._open[name] = collection
            return collection

    def close(self) -> None:
        with self._lock:
            for collection in self._open.values():
                collection.index.close()
            self._open.clear()
