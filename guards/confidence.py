"""One confidence from many signals: a logistic model over guard and generator features.

``ConfidenceModel.fit`` calibrates it on labelled examples (Platt scaling generalised to several
features); ``save``/``load`` keep the fitted weights as versioned JSON beside the configuration.
Until a fitted file is configured, ``ConfidenceModel.prior()`` gives hand-set weights that only
order answers sensibly: its probabilities are not calibrated, and say so (``calibrated=False``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from guards.base import GuardResult

GENERATOR_SIGNALS: dict[str, int] = {
    "token_prob": 1,  # geometric-mean probability of the answer's tokens (centred)
    "retrieval": 1,  # similarity of the best passage (centred)
}
"""Signals that come from the generator and the retriever rather than from a guard; every other
signal is declared by the guard that emits it (``Guard.signals``)."""
FORMAT_VERSION = 1


def features(
    results: Sequence[GuardResult],
    *,
    token_logprobs: Sequence[float] = (),
    retrieval_score: float | None = None,
) -> dict[str, float]:
    """The signals of one answer: the generator's, then each guard's own (``GuardResult.signals``).
    Every signal is centred so that 0 means no evidence either way: a signal nobody measured
    (a guard that abstained, no logprobs) is simply absent and contributes nothing."""
    feats: dict[str, float] = {}
    if token_logprobs:
        feats["token_prob"] = math.exp(sum(token_logprobs) / len(token_logprobs)) - 0.5
    if retrieval_score is not None:
        feats["retrieval"] = retrieval_score - 0.5
    for result in results:
        feats.update(result.signals)
    return feats


def judged_features(first_stage: float, judge_signal: float) -> dict[str, float]:
    """The second stage's input, for an answer the judge read: the first-stage confidence as
    log-odds and the judge's own log-odds signal (``guards.judge``). A second-stage model over
    these two re-weighs the judge against everything else, and needs few labels to fit."""
    c = min(max(first_stage, 1e-6), 1 - 1e-6)
    return {"first_stage": math.log(c / (1 - c)), "judge": judge_signal}


@dataclass(slots=True)
class ConfidenceModel:
    weights: dict[str, float]
    bias: float
    calibrated: bool = False
    version: int = FORMAT_VERSION
    notes: dict[str, float | str] = field(default_factory=dict)

    @classmethod
    def prior(cls) -> ConfidenceModel:
        """Hand-set weights (not calibrated): each signal pushes the way it should."""
        weights = {
            "token_prob": 2.0,
            "agreement": 2.0,
            "grounding": 2.5,
            "coverage": 1.0,
            "quoted": 1.0,
            "unsupported_words": -2.0,
            "novel_terms": -1.5,
            "kg_supported": 1.5,
            "kg_contradicted": -4.0,
            "retrieval": 2.0,
            "repetition_fail": -3.0,
        }
        return cls(weights, bias=0.0, calibrated=False)  # no evidence at all: 0.5

    def score(self, feats: Mapping[str, float]) -> float:
        z = self.bias + sum(w * feats.get(name, 0.0) for name, w in self.weights.items())
        if z < 0:  # the stable form of the logistic on either side: no overflow at any z
            e = math.exp(z)
            return e / (1.0 + e)
        return 1.0 / (1.0 + math.exp(-z))

    @classmethod
    def fit(
        cls,
        rows: Sequence[Mapping[str, float]],
        labels: Sequence[int],
        *,
        names: Sequence[str] | None = None,
        directions: Mapping[str, int] | None = None,
        l2: float = 1e-2,
        steps: int = 50,
        standardize: bool = False,
        groups: Sequence[str] | None = None,
    ) -> ConfidenceModel:
        """Logistic regression by Newton's method (labels: 1 = correct answer) over the signals
        ``names`` (default: every signal some row has); a row without a signal counts it 0.

        With ``directions`` (signal -> +1 or -1, as guards declare them) a signal may only push
        the way it should: while some weight has the wrong sign, the most wrongly signed signal
        is dropped and the rest refitted. A signal that points one way on the training data and
        the other by design is noise there, and would carry over to new data as noise.

        ``standardize`` fits on signals scaled to unit spread, so the ridge penalty ``l2`` shrinks
        every signal alike rather than most the ones with a small range (the weights are scaled
        back: the model still reads raw signals). With ``groups`` (each row's data set) each group
        gets its own intercept while the weights are fitted, so they learn what tells right from
        wrong *within* a set, not which set has more right answers; the one shipped bias is then
        fitted on all rows with the weights held."""
        if len(rows) != len(labels) or len(set(labels)) < 2:
            raise ValueError("fitting needs as many labels as rows, with both classes present")
        if groups is not None and len(groups) != len(rows):
            raise ValueError("fitting needs one group per row")
        names = list(names) if names is not None else sorted({k for r in rows for k in r})
        if directions is not None:
            names = [n for n in names if n in directions]
            dropped: list[str] = []
            while True:
                model = cls.fit(
                    rows,
                    labels,
                    names=names,
                    l2=l2,
                    steps=steps,
                    standardize=standardize,
                    groups=groups,
                )
                wrong = [n for n in names if model.weights[n] * directions[n] < 0]
                if not wrong:
                    model.notes["dropped_for_sign"] = ", ".join(sorted(dropped))
                    return model
                worst = min(wrong, key=lambda n: model.weights[n] * directions[n])
                names.remove(worst)
                dropped.append(worst)
        x = np.array([[r.get(f, 0.0) for f in names] for r in rows], dtype=float).reshape(
            len(rows), len(names)
        )
        y = np.asarray(labels, dtype=float)
        scale = x.std(axis=0) if standardize else np.ones(len(names))
        scale[scale < 1e-9] = 1.0
        centre = x.mean(axis=0) if standardize else np.zeros(len(names))
        z = (x - centre) / scale
        levels = sorted(set(groups)) if groups is not None else [""]
        member = (
            np.array([[g == level for level in levels] for g in groups], dtype=float)
            if groups is not None
            else np.ones((len(rows), 1))
        )
        w = _newton(np.hstack([z, member]), y, l2, penalised=len(names), steps=steps)
        slopes = w[: len(names)] / scale
        # The bias for raw signals, over all rows together: fitted with the slopes held.
        offset = x @ slopes
        bias = _offset_bias(offset, y)
        probs = _sigmoid(offset + bias)
        notes: dict[str, float | str] = {
            "num_examples": float(len(y)),
            "ece": expected_calibration_error(probs, y),
        }
        if standardize:
            notes["standardized"] = "yes"
        if groups is not None:
            notes["intercept_per_group"] = ", ".join(levels)
        return cls(dict(zip(names, map(float, slopes), strict=True)), bias, True, notes=notes)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, path: str | Path) -> ConfidenceModel:
        data = json.loads(Path(path).read_text())
        if data.get("version") != FORMAT_VERSION:
            raise ValueError(
                f"{path}: confidence model version {data.get('version')}, expected {FORMAT_VERSION}"
            )
        return cls(**data)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    """The logistic without overflow warnings at large |z|."""
    out: np.ndarray = np.exp(-np.logaddexp(0.0, -z))
    return out


def _offset_bias(offset: np.ndarray, y: np.ndarray, *, bound: float = 60.0) -> float:
    """The intercept b that makes sum(sigmoid(offset + b)) equal the number of positives: the
    maximum-likelihood bias with the slopes held. The sum rises with b, so bisection finds it
    whatever the offsets (Newton's step diverges when some offsets are huge and the logistic
    is flat there)."""
    low, high = -bound, bound
    target = float(y.sum())
    for _ in range(100):
        mid = (low + high) / 2
        if float(_sigmoid(offset + mid).sum()) < target:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def _newton(
    x: np.ndarray,
    y: np.ndarray,
    l2: float,
    *,
    penalised: int,
    steps: int,
    offset: np.ndarray | None = None,
) -> np.ndarray:
    """Ridge logistic regression: the coefficients of ``x``'s columns (the first ``penalised``
    of them shrunk by ``l2``), with ``offset`` added to every row's logit."""
    w = np.zeros(x.shape[1])
    base = np.zeros(len(y)) if offset is None else offset
    penalty = np.diag([l2] * penalised + [0.0] * (x.shape[1] - penalised))
    for _ in range(steps):
        p = 1 / (1 + np.exp(-(x @ w + base)))
        gradient = x.T @ (p - y) + penalty @ w
        hessian = x.T @ (x * (p * (1 - p))[:, None]) + penalty + 1e-9 * np.eye(x.shape[1])
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if float(np.abs(step).max()) < 1e-8:
            break
    return w


def expected_calibration_error(
    probs: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray, bins: int = 10
) -> float:
    """Mean |accuracy - confidence| over equal-width bins, weighted by bin size."""
    p, y = np.asarray(probs, dtype=float), np.asarray(labels, dtype=float)
    if len(p) == 0:
        return 0.0
    index = np.minimum((p * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        mask = index == b
        if mask.any():
            total += mask.sum() * abs(y[mask].mean() - p[mask].mean())
    return float(total / len(p))
