"""Map an answer's ``[n]`` markers to passages, or attribute uncited answers by word overlap.

Small models often answer correctly from a passage without writing the marker. Rather than
return an answer with no source, each uncited sentence is attributed to the passage that holds
most of its content words (when that passage holds at least half of them), and the citation is
marked ``method="overlap"`` so that callers can tell the two apart.
"""

from __future__ import annotations

import re

from rag.types import Citation, Passage

_MARKER = re.compile(r"\[(\d{1,3})\]")
_WORD = re.compile(r"[a-z0-9]+(?:[-'][a-z0-9]+)*")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_STOPWORDS = frozenset(
    (
        "a an the of to in on for and or but is are was were be been being it its this "
        "that these those as at by with from into than then so such can could would "
        "should will may might do does did not no yes if what which who whom whose when "
        "where why how i you he she they we them their there here also only just about "
        "over under more most less very "
    ).split()
)
MIN_OVERLAP = 0.5
_DECLINE = re.compile(
    r"\b(i (do not|don't|dont) know|cannot answer|can't answer|not (mentioned|provided) in)\b", re.I
)


def content_words(text: str) -> set[str]:
    """Lower-cased words minus stop words."""
    return {w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS}


def cited_numbers(answer: str) -> list[int]:
    """Marker numbers in order of first appearance."""
    return list(dict.fromkeys(int(m) for m in _MARKER.findall(answer)))


def is_declined(answer: str) -> bool:
    """Does the answer say it does not know?"""
    return not answer.strip() or bool(_DECLINE.search(answer))


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
    for sentence in _SENTENCE.split(answer):
        words = content_words(sentence)
        if not words:
            continue
        overlaps = [len(words & pw) / len(words) for pw in passage_words]
        best = max(range(len(passages)), key=lambda i: overlaps[i], default=None)
        if best is not None and overlaps[best] >= MIN_OVERLAP and best + 1 not in numbers:
            numbers.append(best + 1)
    return [_citation(n, passages[n - 1], "overlap") for n in numbers]
