"""Retrieve: the passages relevant enough to answer from, and the index version they come from."""

from __future__ import annotations

from dataclasses import dataclass

from rag.collection import CollectionRegistry
from rag.index_records import RetrievalMode
from rag.retriever import CollectionRetriever
from rag.reviews import index_version
from rag.types import Passage


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


class RetrieveStage:
    """Retrieval (dense, BM25 or hybrid) over the collections of one index folder."""

    def __init__(self, collections: CollectionRegistry):
        self.collections = collections

    def run(
        self,
        question: str,
        index: str,
        top_k: int,
        min_score: float,
        mode: RetrievalMode = "dense",
    ) -> Retrieval:
        """Search ``index``; an unknown index raises ``IndexNotFoundError``."""
        collection = self.collections.get(index)
        ranked = CollectionRetriever(collection, mode).retrieve(question, top_k)
        return Retrieval(index, index_version(collection), ranked, min_score)
