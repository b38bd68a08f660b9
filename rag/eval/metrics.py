"""Metrics of answers and of scores that should rank right answers above wrong ones.

``answer_matches`` follows the usual open-domain QA convention (SQuAD normalisation: case,
punctuation, articles and spacing ignored): a free-form answer is right when it contains a gold
answer as a whole phrase, or shares enough of its words (token F1).
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from guards.confidence import expected_calibration_error

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation + "‘’“”")


def finite_or_none(value: float) -> float | None:
    """None for NaN (an AUROC with one class missing), else the value: JSON has no NaN."""
    return None if math.isnan(value) else value


def share_true(flags: Sequence[bool]) -> float | None:
    """Share of true flags; None for none at all."""
    return sum(flags) / len(flags) if flags else None


def squad_normalize(text: str) -> str:
    """SQuAD's answer normalisation (lower case, no punctuation, no articles, single spaces),
    kept apart from ``guards.text.normalize`` on purpose: the correctness labels and EM/F1 stay
    comparable with published figures and with every record labelled so far."""
    text = _ARTICLES.sub(" ", text.casefold().translate(_PUNCTUATION))
    return " ".join(text.split())


def token_f1(prediction: str, gold: str) -> float:
    """Word-overlap F1 of two answers after normalisation."""
    pred, ref = squad_normalize(prediction).split(), squad_normalize(gold).split()
    common = sum((Counter(pred) & Counter(ref)).values())
    if not pred or not ref or common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def answer_matches(prediction: str, golds: Iterable[str], *, min_f1: float = 0.6) -> bool:
    """Does the answer contain a gold answer (as whole words), or match one with F1 >= min_f1?"""
    padded = f" {squad_normalize(prediction)} "
    for gold in golds:
        norm = squad_normalize(gold)
        if norm and (f" {norm} " in padded or token_f1(prediction, gold) >= min_f1):
            return True
    return False


def auroc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """Area under the ROC curve: the chance that a random positive (label 1) scores above a
    random negative, ties counting half. NaN when a class is missing."""
    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=int)
    positives, negatives = s[y == 1], s[y == 0]
    if len(positives) == 0 or len(negatives) == 0:
        return float("nan")
    return _pair_auroc(positives, negatives)


def _pair_auroc(positives: np.ndarray, negatives: np.ndarray) -> float:
    """The AUROC of these positives' scores against these negatives': for each positive, the
    negatives below it count 1 and those equal to it 1/2 (two binary searches)."""
    ordered = np.sort(negatives)
    below = np.searchsorted(ordered, positives, side="left")
    at_or_below = np.searchsorted(ordered, positives, side="right")
    return float((below + at_or_below).sum() / (2 * len(positives) * len(ordered)))


def auroc_interval(
    scores: Sequence[float],
    labels: Sequence[int],
    *,
    level: float = 0.95,
    rounds: int = 1000,
    seed: int = 0,
) -> tuple[float, float] | None:
    """A percentile-bootstrap interval for ``auroc(scores, labels)``: right and wrong answers
    resampled separately (so every draw keeps both classes and their counts). How far the AUROC
    of a set this size could move by the luck of which questions it holds: with 8 right answers
    of 100 the interval is about 0.5 wide. None when a class is missing."""
    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=int)
    positives, negatives = s[y == 1], s[y == 0]
    if len(positives) == 0 or len(negatives) == 0:
        return None
    rng = np.random.default_rng(seed)
    draws = [
        _pair_auroc(rng.choice(positives, len(positives)), rng.choice(negatives, len(negatives)))
        for _ in range(rounds)
    ]
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return float(low), float(high)


def ece_noise(
    probs: Sequence[float], *, bins: int = 10, rounds: int = 500, seed: int = 0
) -> tuple[float, float]:
    """The expected calibration error a *perfectly* calibrated confidence shows on this many
    answers with these confidences (labels drawn as Bernoulli(p) for each answer): the median
    and the 95th percentile over ``rounds`` draws. On 50 answers sampling noise alone gives an
    ECE of 0.1-0.15, so an ECE target is only measurable where the median is well under it,
    and an ECE above the 95th percentile is miscalibration, not luck."""
    p = np.clip(np.asarray(probs, dtype=float), 0.0, 1.0)
    if len(p) == 0:
        return 0.0, 0.0
    rng = np.random.default_rng(seed)
    draws = [
        expected_calibration_error(p, (rng.random(len(p)) < p).astype(int), bins)
        for _ in range(rounds)
    ]
    median, high = np.percentile(draws, [50, 95])
    return float(median), float(high)


def f1_score(predicted: Sequence[bool], actual: Sequence[bool]) -> float:
    """F1 of a binary flag against the truth."""
    tp = sum(p and a for p, a in zip(predicted, actual, strict=True))
    fp = sum(p and not a for p, a in zip(predicted, actual, strict=True))
    fn = sum(a and not p for p, a in zip(predicted, actual, strict=True))
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def best_threshold(scores: Sequence[float], flagged: Sequence[bool]) -> float:
    """The threshold t maximising the F1 of the flag ``score < t`` (scores: higher = better)."""
    candidates = [*sorted(set(scores)), max(scores, default=0.0) + 1e-9]
    return max(candidates, key=lambda t: f1_score([s < t for s in scores], flagged))


@dataclass(frozen=True, slots=True)
class RiskCoveragePoint:
    coverage: float
    """Share of questions answered (those with the highest scores)."""
    accuracy: float
    """Share of the answered questions answered correctly."""
    threshold: float
    """The lowest score among the answered ones."""


def risk_coverage(
    scores: Sequence[float], correct: Sequence[float], steps: int = 10
) -> list[RiskCoveragePoint]:
    """Accuracy of the answered questions as the threshold moves: answer the top 1/steps,
    2/steps, ..., all of them by score."""
    order = np.argsort(-np.asarray(scores, dtype=float), kind="mergesort")
    right = np.asarray(correct, dtype=float)[order]
    points = []
    for k in range(1, steps + 1):
        n = max(1, round(len(order) * k / steps))
        points.append(
            RiskCoveragePoint(n / len(order), float(right[:n].mean()), float(scores[order[n - 1]]))
        )
    return points


def area_under_risk_coverage(scores: Sequence[float], correct: Sequence[float]) -> float:
    """Mean error over every coverage level (lower is better; AURC)."""
    order = np.argsort(-np.asarray(scores, dtype=float), kind="mergesort")
    wrong = 1.0 - np.asarray(correct, dtype=float)[order]
    return float(np.mean(np.cumsum(wrong) / np.arange(1, len(wrong) + 1)))


def exact_match(prediction: str, golds: Iterable[str]) -> bool:
    """Is the normalised answer equal to a normalised gold answer?"""
    norm = squad_normalize(prediction)
    return any(norm == squad_normalize(g) for g in golds)


def best_token_f1(prediction: str, golds: Iterable[str]) -> float:
    """Token F1 against the closest gold answer."""
    return max((token_f1(prediction, g) for g in golds), default=0.0)


def contains_gold(prediction: str, golds: Iterable[str]) -> bool:
    """Does the answer contain a gold answer as a whole phrase (after normalisation)?"""
    padded = f" {squad_normalize(prediction)} "
    return any((norm := squad_normalize(g)) and f" {norm} " in padded for g in golds)


def recall_at_k(gold_ranks: Sequence[int | None], k: int) -> float:
    """Share of the gold passages found among the first k (ranks start at 1; None: not found)."""
    if not gold_ranks:
        return float("nan")
    return sum(r is not None and r <= k for r in gold_ranks) / len(gold_ranks)


def reciprocal_rank(gold_ranks: Sequence[int | None]) -> float:
    """1 / rank of the first gold passage found; 0 when none was."""
    found = [r for r in gold_ranks if r is not None]
    return 1.0 / min(found) if found else 0.0


def percentiles(values: Sequence[float], qs: Sequence[int] = (50, 90, 99)) -> dict[str, float]:
    """``{"p50": ..., "p90": ..., "p99": ..., "mean": ...}`` (empty when there are no values)."""
    if not len(values):
        return {}
    array = np.asarray(values, dtype=float)
    summary = {f"p{q}": float(np.percentile(array, q)) for q in qs}
    summary["mean"] = float(array.mean())
    return summary


@dataclass(frozen=True, slots=True)
class ReliabilityBin:
    lower: float
    upper: float
    count: int
    mean_confidence: float
    accuracy: float


def reliability_bins(
    probs: Sequence[float], labels: Sequence[int], bins: int = 10
) -> list[ReliabilityBin]:
    """Equal-width confidence bins with their mean confidence and accuracy (the non-empty ones),
    binned exactly as ``expected_calibration_error`` bins them."""
    p, y = np.asarray(probs, dtype=float), np.asarray(labels, dtype=float)
    index = np.minimum((p * bins).astype(int), bins - 1)
    return [
        ReliabilityBin(
            b / bins, (b + 1) / bins, int(mask.sum()), float(p[mask].mean()), float(y[mask].mean())
        )
        for b in range(bins)
        if (mask := index == b).any()
    ]
