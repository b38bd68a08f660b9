"""Self-consistency: do independently sampled answers agree?

Candidates are normalised, grouped by meaning (identical after normalisation, then, with an
embedder, cosine similarity above a threshold), and the largest group wins the vote. The share of
candidates in that group (agreement) and the entropy of the group sizes (discrete semantic
entropy) are the signals: a model that knows the answer says it the same way each time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from guards.answers import QuestionKind, answer_core, question_kind, verdict
from guards.base import Guard, GuardContext, GuardResult, Outcome
from guards.embedder import Embedder
from guards.text import normalize


@dataclass(frozen=True, slots=True)
class Vote:
    clusters: list[list[int]]
    """Candidate indexes per meaning, largest first."""
    agreement: float
    semantic_entropy: float

    @property
    def majority(self) -> list[int]:
        return self.clusters[0]


def cluster_answers(
    texts: list[str], embedder: Embedder | None = None, threshold: float = 0.85
) -> Vote:
    """Group answers by meaning and vote."""
    keys = [normalize(t) for t in texts]
    clusters: list[list[int]] = []
    by_key: dict[str, int] = {}
    for i, key in enumerate(keys):
        if key in by_key:
            clusters[by_key[key]].append(i)
        else:
            by_key[key] = len(clusters)
            clusters.append([i])
    if embedder is not None and len(clusters) > 1:
        vectors = embedder.embed([texts[c[0]] for c in clusters])
        merged: list[list[int]] = []
        centres: list[np.ndarray] = []
        for members, vector in zip(clusters, vectors, strict=True):
            sims = [float(vector @ c) for c in centres]
            best = int(np.argmax(sims)) if sims else -1
            if best >= 0 and sims[best] >= threshold:
                merged[best].extend(members)
            else:
                merged.append(list(members))
                centres.append(vector)
        clusters = merged
    clusters.sort(key=len, reverse=True)
    return Vote(clusters, len(clusters[0]) / len(texts), entropy([len(c) for c in clusters]))


def entropy(sizes: list[int]) -> float:
    """Entropy (nats) of the distribution given by cluster sizes: discrete semantic entropy."""
    total = sum(sizes)
    return -sum(n / total * math.log(n / total) for n in sizes)


def _core(text: str) -> str:
    return answer_core(text) or text


def _verdict_or_core(text: str) -> str:
    """A yes/no question's answers agree when their verdicts do, whatever follows them."""
    return verdict(text) or _core(text)


class SelfConsistencyGuard(Guard):
    """PASS when at least ``min_agreement`` of the candidates mean what the answer means.

    Candidates are compared by their core span (``answer_core``: "The answer is: Paris [1]." and
    "Paris" agree). Signals: the agreement share, and the semantic entropy of the meaning
    clusters over all samples, answer included (normalised by its maximum, log n)."""

    name = "self_consistency"
    signals: ClassVar[Mapping[str, int]] = {"agreement": 1, "semantic_entropy": 1}

    def __init__(
        self,
        embedder: Embedder | None = None,
        *,
        min_agreement: float = 0.5,
        similarity: float = 0.85,
    ):
        self.embedder = embedder
        self.min_agreement = min_agreement
        self.similarity = similarity

    def check(self, ctx: GuardContext) -> GuardResult:
        key = _verdict_or_core if question_kind(ctx.question) is QuestionKind.YES_NO else _core
        texts = [key(c.text) for c in ctx.candidates]
        if len(texts) < 2:
            return self.abstain("self-consistency needs at least two sampled candidates")
        answer = key(ctx.answer)
        vote = cluster_answers([*texts, answer], self.embedder, self.similarity)
        answer_index = len(texts)
        answer_cluster = next(c for c in vote.clusters if answer_index in c)
        # The answer is usually one of the samples: that sample does not vote for itself.
        own = next(
            (i for i, c in enumerate(ctx.candidates) if c.text.strip() == ctx.answer.strip()), None
        )
        voters = len(texts) - (own is not None)
        if voters == 0:
            return self.abstain("no sample other than the answer itself")
        agreeing = len([i for i in answer_cluster if i not in (answer_index, own)]) / voters
        sizes = [len([i for i in c if i != answer_index]) for c in vote.clusters]
        evidence = {
            "cluster_sizes": sizes,
            "agreement": agreeing,
            "semantic_entropy": vote.semantic_entropy,
        }
        # Spread of the samples alone (the answer's own cluster counted only for its samples).
        spread = entropy([n for n in sizes if n]) / math.log(len(texts))
        signals = {"agreement": agreeing - 0.5, "semantic_entropy": 0.5 - spread}
        reason = f"{agreeing:.0%} of the {voters} other samples agree with the answer"
        outcome = Outcome.PASS if agreeing >= self.min_agreement else Outcome.FAIL
        return GuardResult(self.name, outcome, agreeing, reason, evidence, signals)
