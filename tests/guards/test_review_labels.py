"""Labels in the review store: every verdict on a non-gold item becomes one (with its kind and
propensity), end-user feedback is kept apart, calibration versions swap atomically, and verdicts
from before the labels table are carried over."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from guards.review import ItemNotFoundError, NewItem, Resolution, ReviewStore
from guards.review.labels import AnswerRecord
from guards.review.migrations import migrate
from guards.risk import LabelKind, Recalibration
from guards.storage.database import Database
from tests.guards.fake_clock import Clock


def _item(i: int, *, kind: str = "flagged", propensity: float = 1.0) -> NewItem:
    return NewItem(
        f"question {i}?",
        f"answer {i} [1].",
        passages=[{"text": "passage."}],
        confidence=0.5 + i / 100,
        shipped_confidence=0.4 + i / 100,
        signals={"grounding": 0.1 * i, "token_prob": -0.2},
        index_name="docs",
        index_version="v1",
        kind=kind,
        propensity=propensity,
        profile="smollm2-135m",
    )


def label_scenario(store: ReviewStore, clock: Clock) -> None:
    flagged = store.add(_item(1))
    audited = store.add(replace(_item(2, kind="audit", propensity=0.05), uniform=True))
    assert (audited.kind, audited.propensity, audited.uniform) == ("audit", 0.05, True)
    assert audited.signals == {"grounding": pytest.approx(0.2), "token_prob": -0.2}
    for item, action in ((flagged, Resolution.REJECT), (audited, Resolution.APPROVE)):
        store.claim(item.id, "ann")
        clock.now += 1
        store.resolve(item.id, "ann", action)
    escalated = store.add(_item(3))
    store.claim(escalated.id, "ann")
    store.resolve(escalated.id, "ann", Resolution.ESCALATE)  # no verdict yet: no label
    labels = store.labels.labels("docs", "smollm2-135m")
    assert [(lb.correct, lb.kind, lb.propensity, lb.uniform) for lb in labels] == [
        (False, LabelKind.FLAGGED, 1.0, False),
        (True, LabelKind.AUDIT, 0.05, True),
    ]
    assert labels[0].confidence == pytest.approx(0.41)  # the shipped confidence, not 0.51
    assert labels[1].weight == pytest.approx(20.0)
    assert store.labels.labels("docs", "qwen2.5-coder-1.5b") == []
    gold_id = store.gold_from_item(flagged.id, "admin")
    assert gold_id and len(store.labels.labels("docs", "smollm2-135m")) == 2

    store.labels.record_answer(
        AnswerRecord("req-1", "docs", "smollm2-135m", "q?", "answer", 0.8, 0.7, {"a": 1.0})
    )
    up = store.labels.add_feedback("req-1", helpful=True, comment=" thanks ", actor="user-key")
    store.labels.add_feedback("req-1", helpful=False, actor="other-key")
    assert up.comment == "thanks" and up.index_name == "docs"
    assert [f.helpful for f in store.labels.feedback("req-1")] == [True, False]
    with pytest.raises(ItemNotFoundError):
        store.labels.add_feedback("nobody", helpful=True, actor="user-key")
    (counts,) = store.labels.counts()
    assert (counts.flagged, counts.audit, counts.helpful, counts.unhelpful) == (1, 1, 1, 1)
    assert len(store.labels.labels("docs", "smollm2-135m")) == 2  # feedback is no label

    books = store.calibrations
    assert books.in_force("docs", "smollm2-135m") is None
    first = books.write("docs", "smollm2-135m", Recalibration(0.5, 1.0, {}, 0, 12, "intercept"),
                        accepted=True, report={"reason": "accepted"})  # fmt: skip
    books.swap("docs", "smollm2-135m", first)
    second = books.write("docs", "smollm2-135m", Recalibration(-3.0, 1.0, {}, 0, 30, "slope"),
                         accepted=True, report={})  # fmt: skip
    # A crash here, after the write and before the swap: the first version stays in force.
    in_force = books.in_force("docs", "smollm2-135m")
    assert in_force is not None and in_force.version == first == 1 and second == 2
    assert in_force.model.intercept == 0.5 and in_force.model.version == 1
    books.swap("docs", "smollm2-135m", second)
    now_in_force = books.in_force("docs", "smollm2-135m")
    assert now_in_force is not None and now_in_force.model.intercept == -3.0
    assert [v.version for v in books.history("docs", "smollm2-135m")] == [1, 2]
    with pytest.raises(ItemNotFoundError):
        books.swap("docs", "smollm2-135m", 9)


def test_labels_feedback_and_calibrations(tmp_path: Path) -> None:
    clock = Clock()
    label_scenario(ReviewStore(tmp_path / "r.sqlite", gold_rate=0.0, clock=clock), clock)


def test_the_versions_survive_a_restart(tmp_path: Path) -> None:
    store = ReviewStore(tmp_path / "r.sqlite")
    v = store.calibrations.write("docs", "p", Recalibration(1.0, 1.0, {}, 0, 10, "intercept"),
                                 accepted=True, report={})  # fmt: skip
    store.calibrations.swap("docs", "p", v)
    store.close()
    again = ReviewStore(tmp_path / "r.sqlite").calibrations.in_force("docs", "p")
    assert again is not None and again.model.intercept == 1.0


def test_verdicts_from_before_labels_are_carried_over(tmp_path: Path) -> None:
    path = tmp_path / "v5.sqlite"
    old = Database(path)
    migrate(old, to=5)
    old.close()
    with sqlite3.connect(path) as conn:
        for item_id, status, confidence, gold in [
            ("right", "approved", 0.8, None),
            ("wrong", "rejected", 0.3, None),
            ("waiting", "pending", 0.5, None),
            ("gold", "approved", 0.9, "g1"),
            ("unscored", "approved", None, None),
        ]:
            conn.execute(
                "INSERT INTO review_items (id, created_at, status, question, answer, payload, "
                "confidence, resolved_by, resolved_at, deadline, index_name, gold_id) "
                "VALUES (?, 1.0, ?, 'q', 'a.', '{}', ?, 'ann', 2.0, 9e9, 'docs', ?)",
                (item_id, status, confidence, gold),
            )
    store = ReviewStore(path)
    labels = store.labels.labels("docs", "")
    assert [(lb.correct, lb.confidence) for lb in labels] == [(True, 0.8), (False, 0.3)]
    assert store.get("right").kind == "flagged" and store.get("right").propensity == 1.0


def test_bad_items_are_refused() -> None:
    from guards.review import InvalidReviewError

    with pytest.raises(InvalidReviewError):
        NewItem("q?", "a.", kind="sometimes")
    with pytest.raises(InvalidReviewError):
        NewItem("q?", "a.", kind="audit", propensity=0.0)
