"""Conflicting evidence: do the passages give different answers to the question?

Two ways to see it. A passage that states the same thing as the one holding the answer (most of
its words shared) but does not hold the answer gives another value for the same fact: the
counterfactual or outdated copy of a source. And samples that settle on different answers, each
found in some passage, show the passages support more than one answer.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import ClassVar

from guards.alignment import span_support
from guards.answers import (
    QuestionKind,
    answer_core,
    question_kind,
    states_no_answer,
)
from guards.base import Guard, GuardContext, GuardResult, Outcome
from guards.text import content_words, key_terms, normalize


def _similarity(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


class EvidenceConflictGuard(Guard):
    """FAIL when the passages disagree on the answer (or, when no passage holds the answer word
    for word, when two passages state the same thing with different values); else PASS, or
    ABSTAIN when there is nothing to compare."""

    name = "evidence_conflict"
    signals: ClassVar[Mapping[str, int]] = {"conflict": -1}

    def __init__(
        self,
        *,
        min_support: float = 0.99,
        min_same_statement: float = 0.6,
        min_same_terms: float = 0.5,
    ):
        self.min_support = min_support
        self.min_same_statement = min_same_statement
        self.min_same_terms = min_same_terms
        """Without the answer to anchor on, two passages are copies of one statement only if
        most of their names and numbers are shared too (a value replaced, not another subject)."""

    def check(self, ctx: GuardContext) -> GuardResult:
        if not ctx.passages or not answer_core(ctx.answer) or states_no_answer(ctx.answer):
            return self.abstain("no answer or no passages to compare")
        if question_kind(ctx.question) is QuestionKind.YES_NO:
            return self.abstain("a yes/no answer is not a span a passage holds")
        holding = [
            i
            for i, p in enumerate(ctx.passages)
            if span_support(ctx.answer, ctx.question, p.text) >= self.min_support
        ]
        if not holding:
            return self._disagreeing_passages(ctx)
        # Compared without the answer's own words: two copies of one statement that differ
        # only in the value are the same statement.
        answer_words = content_words(answer_core(ctx.answer))
        words = [content_words(p.text) - answer_words for p in ctx.passages]
        restating = sorted(
            {
                j
                for i in holding
                for j in range(len(ctx.passages))
                if j not in holding and _similarity(words[i], words[j]) >= self.min_same_statement
            }
        )
        rivals = self._rival_answers(ctx, holding)
        evidence = {
            "passages_with_answer": [n + 1 for n in holding],
            "same_statement_other_value": [n + 1 for n in restating],
            "rival_answers": rivals,
        }
        if restating or rivals:
            parts = []
            if restating:
                parts.append(
                    f"passage(s) {[n + 1 for n in restating]} state the same as "
                    f"{[n + 1 for n in holding]} with another value"
                )
            if rivals:
                parts.append(f"samples answer {rivals!r}, also found in the passages")
            return GuardResult(
                self.name, Outcome.FAIL, 0.0, "; ".join(parts), evidence, {"conflict": 1.0}
            )
        reason = "no passage gives another answer"
        return GuardResult(self.name, Outcome.PASS, 1.0, reason, evidence, {"conflict": 0.0})

    def _disagreeing_passages(self, ctx: GuardContext) -> GuardResult:
        """Without the answer's span to anchor on: do two passages state the same thing with
        different names or numbers (a source and its edited or outdated copy)? Whatever the
        answer took from them, one of the two is wrong, and a reader has to choose."""
        words = [content_words(p.text) for p in ctx.passages]
        terms = [key_terms(p.text) for p in ctx.passages]
        pairs: list[tuple[int, int, list[str]]] = []
        for i, j in itertools.combinations(range(len(ctx.passages)), 2):
            differing = terms[i] ^ terms[j]
            if not differing or not terms[i] - terms[j] or not terms[j] - terms[i]:
                continue  # one says more than the other, but nothing it says is replaced
            if _similarity(terms[i], terms[j]) < self.min_same_terms:
                continue  # about other things: two records of one template, not two copies
            if _similarity(words[i] - differing, words[j] - differing) >= self.min_same_statement:
                pairs.append((i, j, sorted(differing)))
        if not pairs:
            return self.abstain("no passage holds the answer word for word")
        evidence = {"disagreeing_passages": [[i + 1, j + 1, d] for i, j, d in pairs]}
        first, second, values = pairs[0]
        reason = (
            f"passages [{first + 1}] and [{second + 1}] state the same with different values "
            f"({', '.join(values[:6])})"
        )
        return GuardResult(self.name, Outcome.FAIL, 0.0, reason, evidence, {"conflict": 1.0})

    def _rival_answers(self, ctx: GuardContext, holding: list[int]) -> list[str]:
        """Other samples' answers that passages other than the answer's hold word for word."""
        own = normalize(answer_core(ctx.answer))
        rivals: dict[str, str] = {}
        for candidate in ctx.candidates:
            core = answer_core(candidate.text)
            key = normalize(core)
            if not key or key in own or own in key or states_no_answer(candidate.text):
                continue
            backed = [
                i
                for i, p in enumerate(ctx.passages)
                if span_support(candidate.text, ctx.question, p.text) >= self.min_support
            ]
            if backed and not set(backed) <= set(holding):
                rivals.setdefault(key, core)
        return list(rivals.values())
