"""Retrievers: ``retrieve(query, top_k) -> list[Passage]`` (template method over ``_retrieve``)."""

from __future__ import annotations

from abc import ABC, abstractmethod

from rag.errors import InvalidInputError
from rag.retrieval.collection import Collection
from rag.types import RETRIEVAL_MODES, Passage, RetrievalMode


class Retriever(ABC):
    """Finds the passages most relevant to a query, best first."""

    def retrieve(self, query: str, top_k: int) -> list[Passage]:
        if not query.strip():
            raise InvalidInputError("the query is empty")
        if not 1 <= top_k <= 100:
            raise InvalidInputError(f"top_k must be in [1, 100], got {top_k}")
        return self._retrieve(query, top_k)[:top_k]

    @abstractmethod
    def _retrieve(self, query: str, top_k: int) -> list[Passage]:
        """Subclasses search here, best first; inputs are already validated."""


class CollectionRetriever(Retriever):
    """Search over one collection: dense (cosine of sentence embeddings), BM25, or both fused
    by reciprocal rank (``hybrid``). A passage's ``score`` is its cosine similarity in each."""

    def __init__(self, collection: Collection, mode: RetrievalMode = "dense"):
        if mode not in RETRIEVAL_MODES:
            raise InvalidInputError(f"retrieval must be one of {RETRIEVAL_MODES}, got {mode!r}")
        self.collection = collection
        self.mode = mode

    def _retrieve(self, query: str, top_k: int) -> list[Passage]:
        return [
            Passage(hit.chunk.doc_id, hit.chunk.chunk_id, hit.chunk.text, hit.score, hit.metadata)
            for hit in self.collection.search(query, top_k, mode=self.mode)
        ]
