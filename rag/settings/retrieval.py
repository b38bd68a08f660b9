"""Retrieval settings: indexes, ingestion and how passages are found."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from rag.settings.base import Group
from rag.types import RetrievalMode


class RetrievalSettings(Group):
    """Indexes, ingestion and how passages are found."""

    embedding_model: str | None = Field(
        None, description="sentence-transformers dir; empty = all-MiniLM-L6-v2"
    )
    index_dir: Path = Field(Path("indexes"), description="folder holding one sub-folder per index")
    index_name: str = Field("demo", description="index used when a request names none")
    index_type: Literal["flat", "hnsw"] = Field("flat", description="exact inner product, or HNSW")
    read_only_indexes: bool = Field(
        False,
        description="serve the indexes without writing to them: ingestion, deletion and new "
        "indexes are refused (Ray Serve's API replicas always are)",
    )
    chunk_size: int = Field(256, ge=32, le=8192, description="chunk size in embedding-model tokens")
    chunk_overlap: int = Field(32, ge=0, le=1024, description="tokens shared by consecutive chunks")
    embed_batch_size: int = Field(64, ge=1, le=4096)
    ingest_group_chunks: int = Field(
        1024,
        ge=1,
        description="ingestion commits a group of documents once it holds this many chunks "
        "(or ingest_group_s passed): a crash loses at most the group in progress, and running "
        "the ingestion again skips the committed documents",
    )
    ingest_group_s: float = Field(
        10.0,
        gt=0,
        description="... or once the group took this many seconds to embed, if sooner",
    )
    ingest_max_commit_share: float = Field(
        0.05,
        ge=0.0,
        lt=1.0,
        description="stretch groups so that commits (each rewrites the index's FAISS file) take "
        "at most this share of ingestion time; 0: never stretch",
    )
    top_k: int = Field(4, ge=1, le=50, description="passages retrieved per question")
    min_score: float = Field(0.25, ge=-1.0, le=1.0, description="cosine similarity a passage needs")
    mode: RetrievalMode = Field(
        "dense",
        description="how passages are ranked: dense (embedding similarity), bm25 (the words, "
        "bm25s) or hybrid (both, fused by reciprocal rank); min_score is cosine similarity in "
        "each",
    )
