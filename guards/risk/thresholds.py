"""The answer threshold for a risk the user chooses, with a guarantee (Learn-then-Test).

For each candidate threshold t of a fixed grid (0.999 down to 0.000), the null hypothesis "the
risk at t exceeds the target" is tested with the Clopper–Pearson upper bound of ``bounds``. The
hypotheses are tested in that fixed order, highest threshold first, and testing stops at the
first one not rejected (fixed-sequence testing): every threshold passed before it is certified,
and the family-wise error is at most 1 − confidence without any further correction, because a
hypothesis is only tested once every one before it was rejected (Bates et al., "Distribution-
free, risk-controlling prediction sets"; Angelopoulos et al., "Learn then Test"). The lowest
certified threshold answers the most.

Two risks, chosen by ``RiskMode``:

- ``selective``: the error rate among the answered questions, P(wrong | confidence ≥ t). This is
  what "let through at most 5 % wrong answers" means. It is not monotone in t, and where the
  confidence is weak it can only be certified at high thresholds, so coverage falls.
- ``conformal``: the share of all questions that get a wrong answer delivered,
  P(wrong and confidence ≥ t), the loss of conformal risk control. It falls as t rises, so it
  is always certifiable with enough labels, and answers far more at the same number.

Where a sequence starts matters: at the very top few labels clear the threshold and one error
fails the first test, which ends the sequence; lower down the risk itself may be too high. So
several sequences run, starting where n, 2n, 4n, … labels clear the threshold (n the fewest that
could certify the risk at all, ``min_labels_for``; at most six), each at an equal share of the
error budget 1 − confidence (a union bound), and the lowest threshold any of them certifies is
used. The starts depend on the scores alone, never on the verdicts, so the guarantee holds.
Labels may carry weights (Kish's effective sample size then enters the bound); the server
certifies on uniform labels only, unweighted, where Clopper–Pearson is exact. The guarantee
holds for each certification, made on the labels of that moment.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import beta

from guards.risk.bounds import min_labels_for

GRID = np.round(np.arange(999, -1, -1) / 1000.0, 3)
"""The candidate thresholds, in the order they are tested."""
MAX_SEQUENCES = 6
"""At most this many fixed sequences, each with its share of the error budget."""


class RiskMode(enum.StrEnum):
    SELECTIVE = "selective"
    """The error rate among answered questions."""
    CONFORMAL = "conformal"
    """The share of all questions that get a wrong answer delivered."""


@dataclass(frozen=True, slots=True)
class RiskTarget:
    """What the user accepts: ``risk`` at ``confidence`` (e.g. 5 % wrong, with 90 % confidence)."""

    risk: float
    confidence: float = 0.9
    mode: RiskMode = RiskMode.SELECTIVE

    def __post_init__(self) -> None:
        if not 0.0 < self.risk < 1.0:
            raise ValueError(f"the target risk must be in (0, 1), got {self.risk}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"the risk confidence must be in (0, 1), got {self.confidence}")
        object.__setattr__(self, "mode", RiskMode(self.mode))

    @property
    def min_labels(self) -> int:
        return min_labels_for(self.risk, self.confidence)

    def describe(self) -> str:
        what = "among answered questions" if self.mode is RiskMode.SELECTIVE else "of all questions"
        return f"at most {self.risk:.0%} wrong {what} with {self.confidence:.0%} confidence"


@dataclass(frozen=True, slots=True)
class ThresholdChoice:
    """The certified threshold (None: nothing may be answered automatically) and its figures."""

    target: RiskTarget
    threshold: float | None
    estimate: float | None
    """The (weighted) risk at the threshold, as the labels estimate it."""
    bound: float | None
    """Its upper confidence bound, ≤ the target risk when a threshold is certified."""
    coverage: float
    """The (weighted) share of labelled questions the threshold answers."""
    labels: int
    reason: str

    @property
    def calibrated(self) -> bool:
        return self.threshold is not None

    def as_dict(self) -> dict[str, object]:
        return {
            "target_risk": self.target.risk,
            "risk_confidence": self.target.confidence,
            "risk_mode": self.target.mode.value,
            "threshold": self.threshold,
            "risk_estimate": self.estimate,
            "risk_bound": self.bound,
            "coverage": self.coverage,
            "certifying_labels": self.labels,
            "reason": self.reason,
        }


def _curves(
    scores: np.ndarray, wrong: np.ndarray, weights: np.ndarray, mode: RiskMode
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every grid threshold: the weighted risk estimate, the effective number of labels it
    rests on (Kish) and the weighted coverage."""
    above = scores[None, :] >= GRID[:, None]  # (grid, labels)
    w_above = above @ weights
    total = float(weights.sum())
    wrong_above = above @ (weights * wrong)
    if mode is RiskMode.SELECTIVE:
        with np.errstate(invalid="ignore", divide="ignore"):
            estimate = np.where(w_above > 0, wrong_above / w_above, 0.0)
            n_eff = np.where(w_above > 0, w_above**2 / (above @ weights**2), 0.0)
    else:
        estimate = wrong_above / total
        n_eff = np.full(len(GRID), total * total / float((weights**2).sum()))
    return estimate, n_eff, w_above / total


def _upper(estimate: np.ndarray, n_eff: np.ndarray, confidence: float) -> np.ndarray:
    errors = estimate * n_eff
    with np.errstate(invalid="ignore", divide="ignore"):
        bound = beta.ppf(confidence, errors + 1.0, np.maximum(n_eff - errors, 1e-12))
    return np.where((n_eff <= 0) | (errors >= n_eff), 1.0, bound)


def _starts(n_eff: np.ndarray, needed: int) -> list[int]:
    """Where the sequences start: the highest grid threshold that ``needed``, 2·``needed``,
    4·``needed``, … effective labels clear (scores and weights only, never the verdicts)."""
    starts: list[int] = []
    count = float(needed)
    while (n_eff >= count).any():
        first = int(np.argmax(n_eff >= count))
        if first not in starts:
            starts.append(first)
        count *= 2
        if len(starts) == MAX_SEQUENCES:
            break
    return starts


def choose_threshold(
    scores: ArrayLike,
    correct: ArrayLike,
    target: RiskTarget,
    *,
    weights: ArrayLike | None = None,
    noun: str = "labels",
) -> ThresholdChoice:
    """The lowest threshold whose risk is certified ≤ ``target.risk`` at ``target.confidence``
    by fixed-sequence testing down the grid; None when no sequence certifies any (too few
    labels, or a confidence too weak to separate right from wrong at that risk)."""
    s = np.asarray(scores, dtype=float)
    bad = 1.0 - np.asarray(correct, dtype=float)
    w = np.ones(len(s)) if weights is None else np.asarray(weights, dtype=float)
    if not len(s) == len(bad) == len(w):
        raise ValueError("need one score, one verdict and one weight per label")
    if (w <= 0).any():
        raise ValueError("label weights must be > 0")
    needed = target.min_labels
    if len(s) < needed:
        return ThresholdChoice(
            target, None, None, None, 0.0, len(s),
            f"not_calibrated: {len(s)} {noun}, {target.describe()} needs at least {needed}",
        )  # fmt: skip
    estimate, n_eff, coverage = _curves(s, bad, w, target.mode)
    starts = _starts(n_eff, needed)
    # Each sequence is tested at its share of the error budget (Bonferroni over the sequences).
    level = 1.0 - (1.0 - target.confidence) / max(len(starts), 1)
    bound = _upper(estimate, n_eff, level)
    passed: int | None = None
    for start in starts:
        for i in range(start, len(GRID)):
            if bound[i] > target.risk:
                break
            if passed is None or i > passed:
                passed = i
    if passed is None:
        at = f" (bound {bound[starts[0]]:.3f} at threshold {GRID[starts[0]]:.3f})" if starts else ""
        return ThresholdChoice(
            target, None, None, None, 0.0, len(s),
            f"not_calibrated: no threshold meets {target.describe()} on {len(s)} {noun}{at}",
        )  # fmt: skip
    return ThresholdChoice(
        target,
        float(GRID[passed]),
        float(estimate[passed]),
        float(bound[passed]),
        float(coverage[passed]),
        len(s),
        f"risk {estimate[passed]:.3f} (bound {bound[passed]:.3f}) at threshold "
        f"{GRID[passed]:.3f} on {len(s)} {noun}: {target.describe()}",
    )


def checkpoint(count: int, target: RiskTarget) -> tuple[int, RiskTarget]:
    """Where a deployment certifies: at m, 2m, 4m, … uniform labels (m the fewest that could
    certify at all at the first checkpoint's level), the j-th at confidence 1 − δ / 2^(j+1)
    (δ = 1 − ``target.confidence``). The labels ``count`` has reached give the checkpoint in
    force: how many of the oldest labels it certifies on (0: none reached yet) and its target.

    Certifying afresh after every new label would look at the data again and again until a
    look passes, and so break the bound; at checkpoints whose error budgets sum to δ, the
    chance that any threshold a deployment ever puts in force has a risk above the target is at
    most δ, whatever happens between them."""
    delta = 1.0 - target.confidence
    first = RiskTarget(target.risk, 1.0 - delta / 2, target.mode)
    m = first.min_labels
    if count < m:
        return 0, first
    j = math.floor(math.log2(count / m) + 1e-12)
    return m * 2**j, RiskTarget(target.risk, 1.0 - delta / 2 ** (j + 1), target.mode)


def certify_at_checkpoint(
    scores: ArrayLike, correct: ArrayLike, target: RiskTarget, *, noun: str = "labels"
) -> ThresholdChoice:
    """``choose_threshold`` on the labels of the checkpoint in force (``checkpoint``): the
    oldest m of them, in the order they were drawn."""
    s, y = np.asarray(scores, dtype=float), np.asarray(correct, dtype=bool)
    m, at = checkpoint(len(s), target)
    if m == 0:
        return ThresholdChoice(
            target, None, None, None, 0.0, len(s),
            f"not_calibrated: {len(s)} {noun}, {target.describe()} needs at least "
            f"{at.min_labels} (the first checkpoint, at {at.confidence:.1%})",
        )  # fmt: skip
    choice = choose_threshold(s[:m], y[:m], at, noun=f"{noun} (checkpoint of {m})")
    return replace(choice, target=target)
