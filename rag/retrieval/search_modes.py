"""How each retrieval mode ranks an index's chunks: by the query vector (``dense``), by BM25 over
the query's words (``bm25``), or by both fused by reciprocal rank with the documents their best
passages name by title (``hybrid``). The index (``rag.retrieval.index``) holds the lock and turns
the ranked row ids into chunks."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from rag.retrieval.faiss_store import FaissStore
from rag.retrieval.fusion import reciprocal_rank_fusion
from rag.retrieval.lexical import LexicalStore
from rag.retrieval.title_links import TitleLinks
from rag.types import RetrievalMode

FUSION_DEPTH = 50
"""Hybrid search fuses this many hits (at least ``top_k``) of each of dense and BM25 search."""
LINK_SOURCES = 3
"""Hybrid search follows the title links of this many of its best passages
(``rag.retrieval.title_links``)."""

TitledTexts = Callable[[Sequence[int]], list[tuple[str | None, str]]]
"""(document title, text) of the chunks of the given row ids, in that order."""


def rank(
    mode: RetrievalMode,
    query: np.ndarray,
    text: str | None,
    top_k: int,
    generation: int,
    *,
    vectors: FaissStore,
    lexical: LexicalStore,
    links: TitleLinks,
    titled_texts: TitledTexts,
) -> list[tuple[int, float | None]]:
    """The ``top_k`` best (row id, score) hits, best first: the dense score of a dense hit,
    None (to be scored against the query vector) for the others."""
    if mode == "dense":
        return list(vectors.search(query, top_k))
    depth = max(top_k, FUSION_DEPTH) if mode == "hybrid" else top_k
    assert text is not None
    ranked = [i for i, _ in lexical.search(text, depth, generation)]
    if mode == "hybrid":
        ranked = _hybrid(query, ranked, depth, generation, vectors, links, titled_texts)
    return [(i, None) for i in ranked[:top_k]]


def _hybrid(
    query: np.ndarray,
    lexical: list[int],
    depth: int,
    generation: int,
    vectors: FaissStore,
    links: TitleLinks,
    titled_texts: TitledTexts,
) -> list[int]:
    """Dense and BM25 rankings fused by reciprocal rank, then fused again with the documents
    the best ``LINK_SOURCES`` passages name by title (their first chunks, in reading order)."""
    dense = [i for i, _ in vectors.search(query, depth)]
    fused = reciprocal_rank_fusion([dense, lexical])
    sources = titled_texts(fused[:LINK_SOURCES])
    linked = links.follow(sources, generation)
    return reciprocal_rank_fusion([dense, lexical, linked]) if linked else fused
