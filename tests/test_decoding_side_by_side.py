"""``benchmarks/decoding_side_by_side.py`` on a hand-made run folder: accuracy from the gold
answers, and the confidence AUROC from the recorded confidence or, with ``--rescore``, from a
fitted confidence applied to each answer's recorded signals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.decoding_side_by_side import compare
from guards import ConfidenceModel

# (gold answer, baseline's answer, recorded confidence, token_prob signal), then the other's
QUESTIONS = [
    ("Paris", "Paris [1].", 0.1, 0.9, "Paris.", 0.7, 0.8),
    ("Rome", "Rome [2].", 0.2, 0.8, "Milan.", 0.3, 0.1),
    ("Oslo", "Bergen [1].", 0.9, 0.1, "Oslo [1].", 0.6, 0.9),
    ("Lima", "Quito [3].", 0.8, 0.2, "Quito.", 0.4, 0.2),
]


def _record(item_id: str, answer: str, confidence: float, token_prob: float) -> dict[str, Any]:
    return {
        "id": item_id,
        "answer": answer,
        "confidence": confidence,
        "signals": {"token_prob": token_prob},
        "guards": [{"name": "grounding", "outcome": "pass" if "[" in answer else "fail"}],
        "timings": {"total_s": 1.0},
    }


@pytest.fixture
def run(tmp_path: Path) -> Path:
    out = tmp_path / "squad2"
    (out / "plain").mkdir(parents=True)
    (out / "other").mkdir()
    dataset, plain, other = [], [], []
    for n, (gold, a, conf_a, p_a, b, conf_b, p_b) in enumerate(QUESTIONS):
        item_id = f"q{n}"
        dataset.append({"id": item_id, "question": f"question {n}?", "answers": [gold]})
        plain.append(_record(item_id, a, conf_a, p_a))
        other.append(_record(item_id, b, conf_b, p_b))
    for path, rows in ((out / "dataset.jsonl", dataset), (out / "plain" / "items.jsonl", plain)):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "other" / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in other))
    return out


def test_recorded_confidence(run: Path) -> None:
    figures = compare(run, "plain", "other", seed=0)
    assert figures["questions"] == 4
    assert figures["plain"]["accuracy"] == 0.5 and figures["other"]["accuracy"] == 0.5
    assert figures["plain"]["supported"] == 1.0 and figures["other"]["supported"] == 0.25
    assert figures["changed_answers"] == 4
    assert figures["confidence_from"] == "recorded"
    auroc = figures["confidence_auroc"]
    # the recorded confidences rank the baseline's answers backwards and the other's perfectly
    assert auroc["baseline"] == 0.0 and auroc["other"] == 1.0 and auroc["change"] == 1.0


def test_rescored_with_one_fitted_confidence(run: Path, tmp_path: Path) -> None:
    fitted = tmp_path / "fitted.json"
    ConfidenceModel({"token_prob": 4.0}, bias=-2.0, calibrated=True).save(fitted)
    figures = compare(run, "plain", "other", seed=0, rescore=fitted)
    assert figures["confidence_from"] == str(fitted)
    auroc = figures["confidence_auroc"]
    # token_prob is high on every right answer of both: each ranks perfectly, no change
    assert auroc["baseline"] == 1.0 and auroc["other"] == 1.0 and auroc["change"] == 0.0
    # accuracy does not depend on the confidence
    assert figures["plain"]["accuracy"] == 0.5 and figures["other"]["accuracy"] == 0.5
