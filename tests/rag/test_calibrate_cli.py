"""``ragguard calibrate --index NAME`` on the data directory's review store: the refit's
before/after figures, the version it swaps in, and the threshold for the target risk."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from guards.review import NewItem, Resolution, ReviewStore
from rag.cli import main


def _labelled(data_dir: Path, n: int, shift: float) -> None:
    """``n`` verdicts on answers whose shipped confidence is off by ``shift`` in log-odds."""
    store = ReviewStore(data_dir / "reviews.sqlite", gold_rate=0.0)
    rng = random.Random(4)
    for i in range(n):
        c = rng.uniform(0.05, 0.95)
        right = rng.random() < 1 / (1 + math.exp(-(math.log(c / (1 - c)) + shift)))
        item = store.add(NewItem(f"q{i}?", "a.", confidence=c, shipped_confidence=c,
                                 signals={"grounding": rng.gauss(0, 1)}, index_name="docs",
                                 profile="smollm2-135m", uniform=True))  # fmt: skip
        store.claim(item.id, "ann")
        store.resolve(item.id, "ann", Resolution.APPROVE if right else Resolution.REJECT)
    store.close()


def test_calibrate_prints_before_and_after_and_swaps_the_version_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGGUARD_TARGET_RISK", "0.3")
    data = tmp_path / "data"
    _labelled(data, 400, shift=2.0)  # the shipped confidence is far too low here
    assert main(["calibrate", "--index", "docs", "--data-dir", str(data)]) == 0
    printed = capsys.readouterr().out
    assert "index docs (smollm2-135m): 400 labels" in printed
    assert "version 1: accepted" in printed
    assert "held back" in printed and "all labels" in printed
    assert "in force: version 1 (offsets; intercept +" in printed
    assert "threshold: risk" in printed and "at most 30% wrong among answered" in printed

    assert main(["calibrate", "--index", "docs", "--data-dir", str(data), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["version"] == 2 and report["labels"] == 400
    assert report["status"]["threshold"] is not None and report["status"]["labels"] == 400
    assert report["after"]["log_loss"] <= report["before"]["log_loss"] + 1e-9


def test_calibrate_without_labels_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["calibrate", "--index", "empty", "--data-dir", str(tmp_path / "d")]) != 0
    said = capsys.readouterr().err
    assert "index 'empty' has no reviewer labels for profile smollm2-135m" in said
