"""Map an answer's ``[n]`` markers to passages, or attribute uncited answers by word overlap.

Small models often answer correctly from a passage without writing the marker. Rather than
return an answer with no source, each uncited sentence is attributed to the passage that holds
most of its content words (when that passage holds at least half of them), and the citation is
marked ``method="overlap"`` so that callers can tell the two apart.
"""

from __future__ import annotations

from guards.answers import is_declined
from guards.text import cited_numbers, content_words, overlap, sentences
from rag.types import Citation, Passage

__all__ = ["attribute", "cited_numbers", "content_words", "is_declined"]

MIN_OVERLAP = 0.5


def _citation(number: int, passage: Passage, method: str) -> Citation:
    return Citation(number, passage.doc_id, passage.chunk_id, passage.text, passage.score, method)


def attribute(answer: str, passages: list[Passage]) -> list[Citation]:
    """Citations for an answer given the numbered ``passages`` its prompt showed."""
    explicit = [n for n in cited_numbers(answer) if 1 <= n <= len(passages)]
    if explicit:
        return [_citation(n, passages[n - 1], "explicit") for n in explicit]
    if is_declined(answer):
        return []
    passage_words = [content_words(p.text) for p in passages]
    numbers: list[int] = []
    for sentence in sentences(answer):
        words = content_words(sentence)
        if not words:
            continue
        overlaps = [overlap(words, pw) for pw in passage_words]
        best = max(range(len(passages)), key=lambda i: overlaps[i], default=None)
        if best is not None and overlaps[best] >= MIN_OVERLAP and best + 1 not in numbers:
            numbers.append(best + 1)
    return [_citation(n, passages[n - 1], "overlap") for n in numbers]
