"""Grounding: is each sentence of the answer supported by the passages it cites?

A sentence is supported when the passage(s) it cites hold enough of its content words, or (with
an embedder) are close enough in meaning. A sentence without a marker may be supported by any
passage. Citations to passages that do not exist are flagged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from guards.base import Guard, GuardContext, GuardResult, Outcome
from guards.embedder import Embedder
from guards.text import (
    cited_numbers,
    content_words,
    is_negated,
    key_terms,
    overlap,
    quoted_share,
    sentences,
    strip_markers,
)


class GroundingGuard(Guard):
    """PASS when every sentence is supported; score = share of supported sentences."""

    name = "grounding"
    signals: ClassVar[Mapping[str, int]] = {
        "grounding": 1,
        "coverage": 1,
        "quoted": 1,
        "unsupported_words": -1,
        "novel_terms": -1,
    }

    def __init__(
        self,
        embedder: Embedder | None = None,
        *,
        min_overlap: float = 0.5,
        min_similarity: float = 0.6,
    ):
        self.embedder = embedder
        self.min_overlap = min_overlap
        self.min_similarity = min_similarity

    def check(self, ctx: GuardContext) -> GuardResult:
        if not ctx.passages:
            return self.abstain("no passages to ground the answer in")
        claims = [s for s in sentences(ctx.answer) if content_words(strip_markers(s))]
        if not claims:
            return self.abstain("the answer makes no statement to ground")
        # Support is judged sentence by sentence, and a negated claim needs a negated source:
        # "X does not store Y" shares every content word with "X stores Y".
        passage_sentences = [
            [(content_words(t), is_negated(t)) for t in sentences(p.text)] or [(set(), False)]
            for p in ctx.passages
        ]
        vectors = (
            self.embedder.embed([strip_markers(s) for s in claims] + [p.text for p in ctx.passages])
            if self.embedder
            else None
        )
        unsupported: list[str] = []
        dangling: list[int] = []
        for k, sentence in enumerate(claims):
            cited = cited_numbers(sentence)
            dangling += [n for n in cited if not 1 <= n <= len(ctx.passages)]
            pool = [n - 1 for n in cited if 1 <= n <= len(ctx.passages)] or range(len(ctx.passages))
            words, negated = content_words(strip_markers(sentence)), is_negated(sentence)
            lexical = (
                max(
                    overlap(words, source)
                    for i in pool
                    for source, neg in passage_sentences[i]
                    if neg == negated
                )
                if any(neg == negated for i in pool for _, neg in passage_sentences[i])
                else 0.0
            )
            semantic = (
                max(float(vectors[k] @ vectors[len(claims) + i]) for i in pool)
                if vectors is not None and not negated
                else 0.0
            )
            if lexical < self.min_overlap and semantic < self.min_similarity:
                unsupported.append(sentence)
        supported_share = 1 - len(unsupported) / len(claims)
        # Finer signals for the confidence model: how much of what the answer says occurs in
        # the sources (or the question), how much of it is quoted from them word for word,
        # which of its words and which names and numbers occur in neither.
        source_text = " ".join([ctx.question, *(p.text for p in ctx.passages)])
        source_words = content_words(source_text)
        answer = strip_markers(ctx.answer)
        answer_words = content_words(answer)
        coverage = overlap(answer_words, source_words)
        quoted = quoted_share(answer, source_text)
        unsupported_words = sorted(answer_words - source_words)
        novel_terms = sorted(key_terms(answer) - source_words - key_terms(source_text))
        evidence = {
            "unsupported_sentences": unsupported,
            "dangling_citations": sorted(set(dangling)),
            "coverage": coverage,
            "quoted_share": quoted,
            "unsupported_words": unsupported_words,
            "novel_terms": novel_terms,
        }
        signals = {
            "coverage": coverage - 0.5,
            "quoted": quoted - 0.5,
            "unsupported_words": min(len(unsupported_words), 6) / 6,
            "novel_terms": min(len(novel_terms), 3) / 3,
        }
        if dangling or unsupported:
            reason = (
                f"citation(s) {sorted(set(dangling))} point to no passage"
                if dangling
                else f"{len(unsupported)} of {len(claims)} sentence(s) not supported by "
                "their passages"
            )
            signals["grounding"] = -0.5  # a failure counts as no support at all
            return GuardResult(self.name, Outcome.FAIL, supported_share, reason, evidence, signals)
        signals["grounding"] = 0.5
        return GuardResult(
            self.name, Outcome.PASS, 1.0, "every sentence is supported", evidence, signals
        )
