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

from guards.base import GuardResult, Outcome

FEATURES = (
    "token_prob",  # geometric-mean probability of the answer's tokens (centred)
    "agreement",  # share of samples agreeing with the answer (centred)
    "grounding",  # share of sentences supported by their passages (centred)
    "coverage",  # share of the answer's content words found in the passages or question (centred)
    "quoted",  # share of the answer's words in two-word runs quoted from the sources (centred)
    "unsupported_words",  # content words found in no source (0, 1/6, ..., 1 for 6 or more)
    "novel_terms",  # names and numbers of the answer found in no source (0, 1/3, 2/3, 1)
    "kg_supported",  # 1 if the graph supports a claim and contradicts none
    "kg_contradicted",  # 1 if the graph contradicts a claim
    "retrieval",  # similarity of the best passage (centred)
    "repetition_fail",  # 1 if the repetition guard failed
)
FORMAT_VERSION = 1


def features(
    results: Sequence[GuardResult],
    *,
    token_logprobs: Sequence[float] = (),
    retrieval_score: float | None = None,
) -> dict[str, float]:
    """The feature vector of one answer. Probabilities and shares are centred on 0.5, so that a
    missing signal (a guard that abstained, no logprobs) contributes nothing either way; a
    grounding FAIL counts as no support at all."""
    by_name = {r.name: r for r in results}

    def centred(name: str) -> float:
        r = by_name.get(name)
        if r is None or r.score is None or r.outcome is Outcome.ABSTAIN:
            return 0.0
        return (0.0 if r.outcome is Outcome.FAIL and name == "grounding" else float(r.score)) - 0.5

    grounding = by_name.get("grounding")
    grounded = grounding is not None and grounding.outcome is not Outcome.ABSTAIN
    evidence = grounding.evidence if grounded and grounding else {}
    coverage, quoted = evidence.get("coverage"), evidence.get("quoted_share")
    kg = by_name.get("knowledge_graph")
    repetition = by_name.get("repetition")
    mean_logprob = sum(token_logprobs) / len(token_logprobs) if token_logprobs else None
    return {
        "token_prob": math.exp(mean_logprob) - 0.5 if mean_logprob is not None else 0.0,
        "agreement": centred("self_consistency"),
        "grounding": centred("grounding"),
        "coverage": float(coverage) - 0.5 if isinstance(coverage, int | float) else 0.0,
        "quoted": float(quoted) - 0.5 if isinstance(quoted, int | float) else 0.0,
        "unsupported_words": min(len(evidence.get("unsupported_words", ())), 6) / 6,
        "novel_terms": min(len(evidence.get("novel_terms", ())), 3) / 3,
        "kg_supported": float(kg is not None and kg.outcome is Outcome.PASS),
        "kg_contradicted": float(kg is not None and kg.outcome is Outcome.FAIL),
        "retrieval": retrieval_score - 0.5 if retrieval_score is not None else 0.0,
        "repetition_fail": float(repetition is not None and repetition.outcome is Outcome.FAIL),
    }


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
        return 1.0 / (1.0 + math.exp(-z))

    @classmethod
    def fit(
        cls,
        rows: Sequence[Mapping[str, float]],
        labels: Sequence[int],
        *,
        l2: float = 1e-2,
        steps: int = 50,
    ) -> ConfidenceModel:
        """Logistic regression by Newton's method (labels: 1 = correct answer)."""
        if len(rows) != len(labels) or len(set(labels)) < 2:
            raise ValueError("fitting needs as many labels as rows, with both classes present")
        x = np.array([[r.get(f, 0.0) for f in FEATURES] + [1.0] for r in rows])
        y = np.asarray(labels, dtype=float)
        w = np.zeros(x.shape[1])
        penalty = l2 * np.eye(x.shape[1])
        penalty[-1, -1] = 0.0
        for _ in range(steps):
            p = 1 / (1 + np.exp(-(x @ w)))
            gradient = x.T @ (p - y) + penalty @ w
            hessian = x.T @ (x * (p * (1 - p))[:, None]) + penalty + 1e-9 * np.eye(x.shape[1])
            step = np.linalg.solve(hessian, gradient)
            w -= step
            if float(np.abs(step).max()) < 1e-8:
                break
        probs = 1 / (1 + np.exp(-(x @ w)))
        notes: dict[str, float | str] = {
            "num_examples": float(len(y)),
            "ece": expected_calibration_error(probs, y),
        }
        return cls(
            dict(zip(FEATURES, map(float, w[:-1]), strict=True)), float(w[-1]), True, notes=notes
        )

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
