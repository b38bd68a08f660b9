"""``Calibrator``: the shipped confidence refitted for one collection from its labels.

The shipped confidence (fitted on our development sets) is the prior; a collection's labels move
it away in steps, each step only once enough labels exist to pin it down (``CalibrationRule``):

    logit(c') = intercept + slope · logit(c) + Σ_j offset_j · signal_j

1. below ``intercept_from`` labels (10): nothing moves, c' = c;
2. from 10: the intercept, the collection's base rate (the shipped confidence cannot know how
   often this deployment's model is right);
3. from ``slope_from`` (30): the slope on the shipped log-odds too (over- or under-confidence);
4. from ``offsets_from`` (100): a weight offset per signal, which signals matter here, shrunk
   toward the shipped weights by a ridge penalty worth ``prior_labels`` (100) labels on
   standardised signals: at 100 labels an offset moves about half as far as the data alone
   would take it, at 1,000 about nine tenths.

Labels weigh 1 / propensity (audited answers stand for all that went out), normalised to sum to
the number of labels so that the penalties are in units of labels. A refit is fitted on all but
the held-back labels (a fixed fifth, chosen by a hash of each label's id, so the same label is
always held back) and compared there with the version in force: one that scores a worse log
loss there is refused. No version is ever fitted on a held-back label, so they stay a fair test
of every version (the stages count the labels a version is fitted on).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from guards.confidence import expected_calibration_error
from guards.risk.labels import Label, LabelKind

_EPS = 1e-6


def logit(p: float) -> float:
    p = min(max(p, _EPS), 1.0 - _EPS)
    return math.log(p / (1.0 - p))


def _sigmoid(z: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.exp(-np.logaddexp(0.0, -z))
    return out


@dataclass(frozen=True, slots=True)
class CalibrationRule:
    """How many labels move what (see the module's docstring)."""

    intercept_from: int = 10
    slope_from: int = 30
    offsets_from: int = 100
    prior_labels: float = 100.0
    """Ridge penalty on the standardised weight offsets, in labels."""
    intercept_prior: float = 1.0
    """A weak pull of the intercept toward 0 (keeps it finite when every label agrees)."""
    slope_prior: float = 10.0
    """Pull of the slope toward 1, in labels."""
    min_slope: float = 0.1
    """A fitted slope below this (a confidence that orders answers the wrong way here) falls
    back to the intercept alone: the calibration never reverses the shipped ranking."""
    held_back: float = 0.2
    min_held_back: int = 5
    """Fewer held-back labels than this: a refit is accepted without the comparison."""

    def __post_init__(self) -> None:
        if not 0 < self.intercept_from <= self.slope_from <= self.offsets_from:
            raise ValueError("need 0 < intercept_from <= slope_from <= offsets_from")
        if not 0.0 < self.held_back < 0.5:
            raise ValueError(f"held_back must be in (0, 0.5), got {self.held_back}")


@dataclass(frozen=True, slots=True)
class Recalibration:
    """One version of a collection's calibration (version 0: the shipped confidence as is)."""

    intercept: float = 0.0
    slope: float = 1.0
    offsets: dict[str, float] = field(default_factory=dict)
    version: int = 0
    labels: int = 0
    """How many labels it was fitted on."""
    stage: str = "shipped"
    """What moved: shipped, intercept, slope or offsets."""
    created_at: float = 0.0
    metrics: dict[str, float | str] = field(default_factory=dict)
    seen: int = 0
    """Labels there were when it was refitted, held-back ones included (the next refit is due
    ``calibrate_every`` labels later)."""

    @property
    def is_identity(self) -> bool:
        return self.stage == "shipped"

    def apply(self, confidence: float, signals: Mapping[str, float] | None = None) -> float:
        """This collection's confidence for an answer the shipped one scored ``confidence``."""
        if self.is_identity:
            return confidence
        z = self.intercept + self.slope * logit(confidence)
        if signals:
            z += sum(w * float(signals.get(name, 0.0)) for name, w in self.offsets.items())
        return float(_sigmoid(np.array([z]))[0])

    def scores(self, labels: Sequence[Label]) -> np.ndarray:
        return np.array([self.apply(lb.confidence, lb.signals) for lb in labels], dtype=float)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Recalibration:
        data = json.loads(text)
        return cls(**data)


@dataclass(frozen=True, slots=True)
class RefitOutcome:
    """What a refit did: the version now in force, and the figures it was judged on."""

    accepted: bool
    current: Recalibration
    candidate: Recalibration
    before: dict[str, float]
    """The version in force before, on the held-back labels."""
    after: dict[str, float]
    """The candidate (fitted without them), on the held-back labels."""
    held_back: int
    reason: str


def weighted_auroc(scores: np.ndarray, correct: np.ndarray, weights: np.ndarray) -> float:
    """P(a right answer scores above a wrong one), pairs weighted; ties count half. By ranks
    (one sort), so any number of labels fits in memory."""
    right = (correct > 0.5).astype(float)
    w_pos, w_neg = weights * right, weights * (1.0 - right)
    if w_pos.sum() <= 0 or w_neg.sum() <= 0:
        return float("nan")
    levels, group = np.unique(scores, return_inverse=True)
    pos = np.bincount(group, weights=w_pos, minlength=len(levels))
    neg = np.bincount(group, weights=w_neg, minlength=len(levels))
    below = np.cumsum(neg) - neg  # wrong answers' weight scored strictly lower
    return float((pos * (below + 0.5 * neg)).sum() / (w_pos.sum() * w_neg.sum()))


def evaluate(model: Recalibration, labels: Sequence[Label]) -> dict[str, float]:
    """Weighted log loss, ECE, AUROC and accuracy-vs-confidence gap of ``model`` on ``labels``."""
    if not labels:
        return {"labels": 0.0}
    p = np.clip(model.scores(labels), _EPS, 1 - _EPS)
    y = np.array([lb.correct for lb in labels], dtype=float)
    w = np.array([lb.weight for lb in labels], dtype=float)
    loss = -(w * (y * np.log(p) + (1 - y) * np.log(1 - p))).sum() / w.sum()
    out = {
        "labels": float(len(labels)),
        "log_loss": float(loss),
        "ece": expected_calibration_error(p, y),
        "mean_confidence": float((w * p).sum() / w.sum()),
        "accuracy": float((w * y).sum() / w.sum()),
    }
    auroc = weighted_auroc(p, y, w)
    if not math.isnan(auroc):  # one class only: no ranking to score
        out["auroc"] = auroc
    return out


class Calibrator:
    """Fits a ``Recalibration`` from one collection's labels by the ``CalibrationRule``."""

    def __init__(self, rule: CalibrationRule | None = None):
        self.rule = rule or CalibrationRule()

    @staticmethod
    def fittable(labels: Sequence[Label]) -> list[Label]:
        """Reviewer labels only: end-user feedback is never fitted."""
        return [lb for lb in labels if lb.kind is not LabelKind.FEEDBACK]

    def is_held_back(self, label: Label, position: int) -> bool:
        """A fixed share of labels, chosen by a hash of the id (the position when it has none)."""
        key = label.id or f"#{position}"
        digest = hashlib.sha256(key.encode()).digest()
        return int.from_bytes(digest[:4], "big") / 2**32 < self.rule.held_back

    def certifying(self, labels: Sequence[Label], model: Recalibration) -> list[Label]:
        """The uniform labels that may certify a threshold on ``model``'s scores: all of them
        while the model only shifts and scales the shipped log-odds (its slope is kept
        positive, so every answer keeps its rank and the labels it was fitted on judge its
        thresholds as fairly as any), but once signal offsets re-rank the answers, only those
        it was not fitted on: the held-back ones and those given after it was fitted
        (``created_at`` later than the model's)."""
        labels = self.fittable(labels)
        if model.stage != "offsets":
            return [lb for lb in labels if lb.uniform]
        return [
            lb
            for i, lb in enumerate(labels)
            if lb.uniform and (lb.created_at > model.created_at or self.is_held_back(lb, i))
        ]

    def stage_for(self, count: int) -> str:
        r = self.rule
        if count >= r.offsets_from:
            return "offsets"
        if count >= r.slope_from:
            return "slope"
        if count >= r.intercept_from:
            return "intercept"
        return "shipped"

    def fit(
        self,
        labels: Sequence[Label],
        *,
        version: int = 0,
        now: float = 0.0,
        stage: str | None = None,
    ) -> Recalibration:
        """The recalibration the rule allows for this many labels, fitted on all of them."""
        labels = self.fittable(labels)
        stage = stage or self.stage_for(len(labels))
        if stage == "shipped":
            return Recalibration(version=version, labels=len(labels), created_at=now)
        r = self.rule
        base = np.array([logit(lb.confidence) for lb in labels])
        y = np.array([lb.correct for lb in labels], dtype=float)
        w = np.array([lb.weight for lb in labels], dtype=float)
        w = w * (len(w) / w.sum())
        columns = [np.ones(len(y))]
        penalties = [r.intercept_prior]
        if stage in ("slope", "offsets"):
            columns.append(base)  # the slope's change from 1
            penalties.append(r.slope_prior)
        names: list[str] = []
        centre = scale = np.zeros(0)
        if stage == "offsets":
            names = sorted({k for lb in labels for k in lb.signals})
            raw = np.array([[float(lb.signals.get(n, 0.0)) for n in names] for lb in labels])
            raw = raw.reshape(len(labels), len(names))
            centre = (w[:, None] * raw).sum(axis=0) / w.sum()
            scale = np.sqrt((w[:, None] * (raw - centre) ** 2).sum(axis=0) / w.sum())
            keep = scale > 1e-9  # a signal that never varies here says nothing here
            names = [n for n, k in zip(names, keep, strict=True) if k]
            centre, scale, raw = centre[keep], scale[keep], raw[:, keep]
            columns.extend(((raw - centre) / scale).T)
            penalties.extend([r.prior_labels] * len(names))
        x = np.column_stack(columns)
        coef = _weighted_newton(x, y, w, base, np.array(penalties))
        intercept = float(coef[0])
        slope = 1.0 + (float(coef[1]) if stage in ("slope", "offsets") else 0.0)
        offsets: dict[str, float] = {}
        if names:
            deltas = coef[2:] / scale
            intercept -= float((deltas * centre).sum())
            offsets = {n: float(d) for n, d in zip(names, deltas, strict=True)}
        if stage != "intercept" and slope < r.min_slope:
            return self.fit(labels, version=version, now=now, stage="intercept")
        return Recalibration(intercept, slope, offsets, version, len(labels), stage, now)

    def refit(
        self,
        labels: Sequence[Label],
        current: Recalibration,
        *,
        version: int,
        now: float = 0.0,
    ) -> RefitOutcome:
        """A new version fitted on ``labels`` but the held-back ones, or the current one kept
        when the new one scores a worse log loss on those."""
        labels = self.fittable(labels)
        held = [lb for i, lb in enumerate(labels) if self.is_held_back(lb, i)]
        train = [lb for i, lb in enumerate(labels) if not self.is_held_back(lb, i)]
        final = self.fit(train, version=version, now=now)
        before, after = evaluate(current, held), evaluate(final, held)
        if len(held) < self.rule.min_held_back or len({lb.correct for lb in held}) < 2:
            reason = f"accepted: {len(held)} held-back labels, too few (or one-sided) to compare"
            accepted = True
        elif after["log_loss"] > before["log_loss"] + 1e-9:
            reason = (
                f"refused: log loss {after['log_loss']:.4f} on {len(held)} held-back labels, "
                f"worse than version {current.version}'s {before['log_loss']:.4f}"
            )
            accepted = False
        else:
            reason = (
                f"accepted: log loss {after['log_loss']:.4f} on {len(held)} held-back labels "
                f"(version {current.version}: {before['log_loss']:.4f})"
            )
            accepted = True
        if accepted:
            metrics: dict[str, float | str] = {f"held_back_{k}": v for k, v in after.items()}
            final = replace(final, metrics=metrics)
        final = replace(final, seen=len(labels))
        return RefitOutcome(
            accepted, final if accepted else current, final, before, after, len(held), reason
        )


def _weighted_newton(
    x: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    offset: np.ndarray,
    penalties: np.ndarray,
    *,
    steps: int = 100,
) -> np.ndarray:
    """Weighted ridge logistic regression with a fixed per-row offset; every coefficient
    shrunk toward 0 by its own penalty."""
    coef = np.zeros(x.shape[1])
    penalty = np.diag(penalties)
    for _ in range(steps):
        p = _sigmoid(x @ coef + offset)
        gradient = x.T @ (w * (p - y)) + penalty @ coef
        hessian = x.T @ (x * (w * p * (1 - p))[:, None]) + penalty + 1e-9 * np.eye(len(coef))
        step = np.linalg.solve(hessian, gradient)
        coef -= step
        if float(np.abs(step).max()) < 1e-9:
            break
    return coef
