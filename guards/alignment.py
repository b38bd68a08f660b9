"""Does the answer answer the question, from the passages?

The grounding guard asks whether the answer's sentences are supported; this one asks whether the
answer gives what the question asks for (a yes/no, a number, a name), whether it adds anything to
the question (an answer that only restates the question answers nothing), whether its core span
occurs in the passages, and in the best-ranked one, and whether a passage states it *about what
the question asks*: a name found in a sentence about another year or another film is no support
(``context_match``). A yes/no answer has no span: its verdict is compared with the direction of
the best-ranked passage's findings (``verdict_evidence``, ``guards.polarity``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from guards.answers import (
    QuestionKind,
    answer_core,
    kind_matches,
    new_words,
    question_kind,
    states_no_answer,
    verdict,
)
from guards.base import Guard, GuardContext, GuardResult, Outcome
from guards.polarity import verdict_evidence
from guards.text import content_words, key_terms, normalize, overlap, sentences


def span_support(answer: str, question: str, passage: str) -> float:
    """1 when the answer's core occurs in the passage word for word; else the share of the words
    the answer adds to the question that the passage holds."""
    core = normalize(answer_core(answer))
    if core and f" {core} " in f" {normalize(passage)} ":
        return 1.0
    words = new_words(answer, question) or content_words(answer_core(answer))
    return overlap(words, content_words(passage))


def context_match(answer: str, question: str, passages: Sequence[str]) -> float | None:
    """How much of what the question is about the passages state beside the answer.

    The question's names and numbers (its content words when it has none) that the answer does
    not itself repeat are looked for in each passage sentence that holds the answer's core (or
    half the words it adds to the question), together with that passage's first sentence, which
    names what the passage is about. The best share over those sentences; None when no sentence
    holds the answer, or the answer adds nothing to look for. "Who won the 2021 Tour?" answered
    from "Egan Bernal won the 2019 Tour" scores low: the sentence is about another year."""
    core = answer_core(answer)
    fresh = new_words(answer, question)
    normal = normalize(core)
    if not normal or not fresh:
        return None
    answered = content_words(core) | key_terms(core)
    wanted = key_terms(question) - answered or content_words(question) - answered
    if not wanted:
        return None
    best: float | None = None
    for passage in passages:
        said = sentences(passage)
        for sentence in said:
            holds = f" {normal} " in f" {normalize(sentence)} "
            if not holds and overlap(fresh, content_words(sentence)) < 0.5:
                continue
            window = f"{said[0]} {sentence}"
            share = overlap(wanted, content_words(window) | key_terms(window))
            best = share if best is None else max(best, share)
    return best


class AnswerEvidenceGuard(Guard):
    """PASS when the answer has the asked-for kind, adds to the question and is found in a
    passage; score = how much of its core the best passage holds."""

    name = "answer_evidence"
    signals: ClassVar[Mapping[str, int]] = {
        "span_in_passages": 1,
        "span_in_top_passage": 1,
        "kind_match": 1,
        "answers_question": 1,
        "context_match": 1,
        "verdict_evidence": 1,
    }

    def __init__(self, *, min_support: float = 0.5):
        self.min_support = min_support

    def check(self, ctx: GuardContext) -> GuardResult:
        if not ctx.passages:
            return self.abstain("no passages to find the answer in")
        if not answer_core(ctx.answer) or states_no_answer(ctx.answer):
            return self.abstain("the answer states nothing to look for")
        kind = question_kind(ctx.question)
        signals: dict[str, float] = {}
        problems: list[str] = []
        matches = kind_matches(kind, ctx.answer, ctx.question)
        if matches is not None:
            signals["kind_match"] = 0.5 if matches else -0.5
            if not matches:
                problems.append(
                    "the answer names neither option the question offers"
                    if kind is QuestionKind.CHOICE
                    else f"the question asks for {kind.value.replace('_', '/')}"
                )
        evidence: dict[str, object] = {"question_kind": kind.value, "core": answer_core(ctx.answer)}
        if kind is QuestionKind.YES_NO:  # "yes" is in no passage: the kind, and the findings'
            score = 1.0 if matches else 0.0  # direction in the best-ranked passage
            leaning = verdict_evidence(verdict(ctx.answer), ctx.ranked[0].text)
            if leaning is not None:
                signals["verdict_evidence"] = leaning
                evidence["verdict_evidence"] = leaning
        else:
            fresh = bool(new_words(ctx.answer, ctx.question))
            signals["answers_question"] = 0.5 if fresh else -0.5
            if not fresh:
                problems.append("the answer only restates the question")
            support = [span_support(ctx.answer, ctx.question, p.text) for p in ctx.passages]
            score = max(support)
            signals["span_in_passages"] = score - 0.5
            best = max(range(len(support)), key=lambda i: ctx.passages[i].score)
            signals["span_in_top_passage"] = support[best] - 0.5
            evidence["support_by_passage"] = support
            matched = context_match(ctx.answer, ctx.question, [p.text for p in ctx.passages])
            if matched is not None:
                signals["context_match"] = matched - 0.5
                evidence["context_match"] = matched
            if score < self.min_support:
                problems.append("no passage holds the answer")
        if problems:
            return GuardResult(
                self.name, Outcome.FAIL, score, "; ".join(problems), evidence, signals
            )
        reason = "the answer has the asked-for kind and a passage holds it"
        return GuardResult(self.name, Outcome.PASS, score, reason, evidence, signals)
