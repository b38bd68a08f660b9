"""Two-fold cross-fitting: each answer is scored, and flagged, by what was fitted on the other
fold, so no figure comes from a model or a threshold that saw the answer it judges.

An answer's fold is its group's parity (``group % 2``): the answers of one group (the right and
the hallucinated answer of one HaluEval item, say) always fall in the same fold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from guards import ConfidenceModel
from rag.eval.metrics import best_threshold, f1_score

NUM_FOLDS = 2


def fold_of(group: int) -> int:
    """The fold an answer of ``group`` belongs to."""
    return group % NUM_FOLDS


def cross_fitted(
    rows: Sequence[Mapping[str, float]], labels: Sequence[int], groups: Sequence[int]
) -> list[float]:
    """Out-of-fold confidences: fold k is scored by the model fitted on the other fold."""
    scores = [0.0] * len(rows)
    for fold in range(NUM_FOLDS):
        train = [i for i, g in enumerate(groups) if fold_of(g) != fold]
        model = ConfidenceModel.fit([rows[i] for i in train], [labels[i] for i in train])
        for i, g in enumerate(groups):
            if fold_of(g) == fold:
                scores[i] = model.score(rows[i])
    return scores


def flag_f1(scores: Sequence[float], labels: Sequence[int], groups: Sequence[int]) -> float:
    """F1 of the flag "wrong" (score < t), t chosen on the other fold: no peeking."""
    predicted = [False] * len(scores)
    for fold in range(NUM_FOLDS):
        train = [i for i, g in enumerate(groups) if fold_of(g) != fold]
        t = best_threshold([scores[i] for i in train], [labels[i] == 0 for i in train])
        for i, g in enumerate(groups):
            if fold_of(g) == fold:
                predicted[i] = scores[i] < t
    return f1_score(predicted, [y == 0 for y in labels])
