"""What an index reports: its manifest, its documents and its search hits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rag.retrieval.documents import Chunk


@dataclass(frozen=True, slots=True)
class DocumentInfo:
    """What the index knows about one ingested document."""

    doc_id: str
    content_hash: str
    num_chunks: int
    metadata: dict[str, Any]
    ingested_at: float


@dataclass(frozen=True, slots=True)
class IndexInfo:
    """The manifest: how the index was built and what it holds."""

    name: str
    format_version: int
    embedding_model: str
    dimension: int
    index_type: str
    chunk_size: int
    chunk_overlap: int
    num_documents: int
    num_chunks: int
    generation: int
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class ScoredChunk:
    """A search hit: the chunk and its cosine similarity to the query (whatever ranked it)."""

    chunk: Chunk
    score: float
    metadata: dict[str, Any]
