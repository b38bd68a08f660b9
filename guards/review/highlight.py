"""Which passage sentences an answer rests on, for the reviewer's page to highlight."""

from __future__ import annotations

from guards.text import cited_numbers, content_words, overlap, sentences, strip_markers

MIN_OVERLAP = 0.3
"""Share of a passage sentence's content words the answer sentence must share to be marked."""


def cited_sentences(answer: str, passages: list[str]) -> list[list[str]]:
    """For each passage, its sentences that an answer sentence citing it (or, without a marker,
    any passage) overlaps best with; passages are numbered from 1 as in the prompt."""
    split = [sentences(p) for p in passages]
    marked: list[set[int]] = [set() for _ in passages]
    for claim in sentences(answer):
        words = content_words(strip_markers(claim))
        if not words:
            continue
        cited = [n - 1 for n in cited_numbers(claim) if 1 <= n <= len(passages)]
        best: tuple[float, int, int] | None = None
        for i in cited or range(len(passages)):
            for j, source in enumerate(split[i]):
                score = overlap(content_words(source), words)
                if score >= MIN_OVERLAP and (best is None or score > best[0]):
                    best = (score, i, j)
        if best is not None:
            marked[best[1]].add(best[2])
    return [[split[i][j] for j in sorted(js)] for i, js in enumerate(marked)]
