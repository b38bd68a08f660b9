"""Retrievers: ``retrieve(query, top_k) -> list[Passage]`` (template method over ``_retrieve``)."""

from __future__ import annotations

from abc import ABC, abstractmethod

from rag.collection import Collection
from rag.errors import InvalidInputError
from rag.types import Passage


class Retriever(ABC):
    """Finds the passages most relevant to a query, best first."""

    def retrieve(self, query: str, top_k: int) -> list[Passage]:
        if not query.strip():
            raise InvalidInputError("the query is empty")
        if not 1 <= top_k <= 100:
            raise InvalidInputError(f"top_k must be in [1, 100], got {top_k}")
        passages = self._retrieve(query, top_k)
        return sorted(passages, key=lambda p: p.score, reverse=True)[:top_k]

    @abstractmethod
    def _retrieve(self, query: str, top_k: int) -> list[Passage]:
        """Subclasses search here; inputs are already validated."""


class VectorRetriever(Retriever):
    """Dense retrieval: cosine similarity of sentence embeddings over a collection."""

    def __init__(self, collection: Collection):
        self.collection = collection

    def _retrieve(self, query: str, top_k: int) -> list[Passage]:
        return [
            Passage(hit.chunk.doc_id, hit.chunk.chunk_id, hit.chunk.text, hit.score, hit.metadata)
            for hit in self.collection.search(query, top_k)
        ]
