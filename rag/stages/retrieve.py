"""Retrieve: the passages relevant enough to answer from, and the index version they come from."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from rag.retrieval.collection import CollectionRegistry, check_index_name
from rag.retrieval.retriever import CollectionRetriever, Retriever
from rag.review_desk import index_version
from rag.types import Passage, RetrievalMode


@dataclass(frozen=True, slots=True)
class Retrieval:
    """What the retrieve stage hands on."""

    index: str
    version: str
    """The index's content version, read after the search (keys the reviewed-answer cache)."""
    ranked: list[Passage]
    """Every passage found, best first."""
    min_score: float

    @property
    def passages(self) -> list[Passage]:
        """Those that clear the relevance threshold."""
        return [p for p in self.ranked if p.score >= self.min_score]

    @property
    def empty_reason(self) -> str:
        """Why no passage is usable (only meaningful when ``passages`` is empty)."""
        if not self.ranked:
            return "the index holds no passages"
        best = max(p.score for p in self.ranked)
        return (
            "no passage is relevant enough to answer "
            f"(best score {best:.3f} < min_score {self.min_score})"
        )


def content_version(passages: list[Passage]) -> str:
    """A version of what a retriever without an index version returned: it changes whenever
    the passages do."""
    digest = hashlib.sha256()
    for p in passages:
        digest.update(f"{p.chunk_id}\0{p.text}\0".encode())
    return f"content:{digest.hexdigest()[:16]}"


class RetrieveStage:
    """Retrieval (dense, BM25 or hybrid) over the collections of one index folder, and over
    retrievers registered by name (a llama-index retriever, say), which rank as they do."""

    def __init__(self, collections: CollectionRegistry):
        self.collections = collections
        self._registered: dict[str, Retriever] = {}

    def register(self, name: str, retriever: Retriever) -> None:
        """Answer questions asked of index ``name`` from ``retriever`` (over a built index of
        that name, if any). Its passages' scores are held to ``min_score`` like any others."""
        self._registered[check_index_name(name)] = retriever

    def unregister(self, name: str) -> None:
        self._registered.pop(name, None)

    @property
    def registered(self) -> list[str]:
        return sorted(self._registered)

    def run(
        self,
        question: str,
        index: str,
        top_k: int,
        min_score: float,
        mode: RetrievalMode = "dense",
    ) -> Retrieval:
        """Search ``index``; an unknown index raises ``IndexNotFoundError``. ``mode`` applies
        to built indexes; a registered retriever ranks its own way."""
        if (registered := self._registered.get(index)) is not None:
            ranked = registered.retrieve(question, top_k)
            return Retrieval(index, content_version(ranked), ranked, min_score)
        collection = self.collections.get(index)
        ranked = CollectionRetriever(collection, mode).retrieve(question, top_k)
        return Retrieval(index, index_version(collection), ranked, min_score)
