"""The labels the risk control learns from, kept beside the review queue.

A reviewer's verdict on a non-gold item becomes a label in the same transaction as the verdict
(approve = right; edit or reject = wrong), with the item's propensity, shipped confidence,
signals and profile, so it can never be lost between the two. Checked answers are recorded by
their request id (``record_answer``) so that end users can give feedback on them; feedback is
kept apart (``feedback``) as a weak label and never mixed into ``labels``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from guards.review.errors import InvalidReviewError, ItemNotFoundError
from guards.review.models import Resolution, ReviewItem
from guards.risk import Label, LabelKind
from guards.storage.database import Cursor, Database

_LABEL_COLUMNS = (
    "l.id, l.correct, l.confidence, l.signals, l.propensity, l.kind, l.created_at, l.uniform, "
    "COALESCE(r.created_at, l.created_at)"
)


@dataclass(frozen=True, slots=True)
class AnswerRecord:
    """A checked answer as delivered (or flagged): what feedback on it refers to."""

    id: str
    index_name: str
    profile: str
    question: str
    decision: str
    confidence: float | None
    shipped_confidence: float | None
    signals: dict[str, float] = field(default_factory=dict)
    review_id: str | None = None


@dataclass(frozen=True, slots=True)
class Feedback:
    id: int
    answer_id: str
    index_name: str
    profile: str
    helpful: bool
    comment: str
    actor: str
    created_at: float


@dataclass(frozen=True, slots=True)
class LabelCounts:
    """One collection's labels so far, by where they came from."""

    index_name: str
    profile: str
    flagged: int = 0
    audit: int = 0
    uniform: int = 0
    """Reviewer labels drawn independently of their confidence (those that certify)."""
    helpful: int = 0
    """End-user feedback: thumbs up."""
    unhelpful: int = 0

    @property
    def reviewed(self) -> int:
        return self.flagged + self.audit


def verdict_label(cur: Cursor, item: ReviewItem, actor: str, now: float) -> bool:
    """Record a reviewer's verdict on ``item`` as a label (inside the verdict's transaction);
    False for items that teach nothing (gold items, escalations, no confidence, no index)."""
    if item.gold_id is not None or item.resolution is None:
        return False
    if item.resolution not in (Resolution.APPROVE, Resolution.EDIT, Resolution.REJECT):
        return False
    confidence = item.shipped_confidence if item.shipped_confidence is not None else item.confidence
    if confidence is None or not item.index_name:
        return False
    cur.execute(
        "INSERT INTO labels (item_id, index_name, profile, kind, correct, propensity, uniform, "
        "confidence, signals, actor, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (item_id) DO NOTHING",
        (
            item.id,
            item.index_name,
            item.profile,
            item.kind,
            int(item.resolution is Resolution.APPROVE),
            item.propensity,
            int(item.uniform),
            min(max(float(confidence), 0.0), 1.0),
            json.dumps(item.signals),
            actor,
            now,
        ),
    )
    return True


class LabelBook:
    """Labels, delivered answers and feedback of one review database."""

    def __init__(self, db: Database, clock: Callable[[], float]):
        self.db = db
        self.clock = clock

    def labels(self, index_name: str, profile: str) -> list[Label]:
        """Every reviewer label of one collection and generator profile, oldest first."""
        with self.db.read() as cur:
            rows = cur.execute(
                f"SELECT {_LABEL_COLUMNS} FROM labels l LEFT JOIN review_items r "
                "ON r.id = l.item_id WHERE l.index_name = ? AND l.profile = ? ORDER BY l.id",
                (index_name, profile),
            ).fetchall()
        return [
            Label(
                correct=bool(r[1]),
                confidence=float(r[2]),
                signals=json.loads(r[3]),
                propensity=float(r[4]),
                kind=LabelKind(r[5]),
                id=str(r[0]),
                created_at=float(r[6]),
                uniform=bool(r[7]),
                drawn_at=float(r[8]),
            )
            for r in rows
        ]

    def first_waiting_draw(self, index_name: str, profile: str) -> float | None:
        """When the oldest uniform draw still waiting for a verdict was queued (None: none
        waits). Uniform labels drawn after it do not certify yet: reviewers take items in
        priority order, so the verdicts that came back first are not a uniform sample of the
        draws."""
        with self.db.read() as cur:
            row = cur.execute(
                "SELECT MIN(created_at) FROM review_items WHERE index_name = ? AND profile = ? "
                "AND uniform = 1 AND gold_id IS NULL "
                "AND status IN ('pending', 'claimed', 'escalated')",
                (index_name, profile),
            ).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def counts(self) -> list[LabelCounts]:
        """Labels and feedback per collection (every collection that has either)."""
        found: dict[tuple[str, str], dict[str, int]] = {}
        with self.db.read() as cur:
            for index, profile, kind, uniform, n in cur.execute(
                "SELECT index_name, profile, kind, uniform, COUNT(*) FROM labels "
                "GROUP BY index_name, profile, kind, uniform"
            ).fetchall():
                counts = found.setdefault((index, profile), {})
                counts[kind] = counts.get(kind, 0) + int(n)
                if uniform:
                    counts["uniform"] = counts.get("uniform", 0) + int(n)
            for index, profile, helpful, n in cur.execute(
                "SELECT index_name, profile, helpful, COUNT(*) FROM feedback "
                "GROUP BY index_name, profile, helpful"
            ).fetchall():
                key = "helpful" if helpful else "unhelpful"
                found.setdefault((index, profile), {})[key] = int(n)
        return [
            LabelCounts(index, profile, **counts)
            for (index, profile), counts in sorted(found.items())
        ]

    def record_answer(self, record: AnswerRecord) -> None:
        """Keep a checked answer, so feedback can name it (the same id again: no change)."""
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO answers (id, index_name, profile, question, decision, confidence, "
                "shipped_confidence, signals, review_id, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                (
                    record.id,
                    record.index_name,
                    record.profile,
                    record.question,
                    record.decision,
                    record.confidence,
                    record.shipped_confidence,
                    json.dumps(record.signals),
                    record.review_id,
                    self.clock(),
                ),
            )

    def answer(self, answer_id: str) -> AnswerRecord:
        with self.db.read() as cur:
            row = cur.execute(
                "SELECT id, index_name, profile, question, decision, confidence, "
                "shipped_confidence, signals, review_id FROM answers WHERE id = ?",
                (answer_id,),
            ).fetchone()
        if row is None:
            raise ItemNotFoundError(f"no answer has id {answer_id!r}")
        return AnswerRecord(
            id=row[0],
            index_name=row[1],
            profile=row[2],
            question=row[3],
            decision=row[4],
            confidence=row[5],
            shipped_confidence=row[6],
            signals=json.loads(row[7]),
            review_id=row[8],
        )

    def add_feedback(
        self, answer_id: str, *, helpful: bool, comment: str = "", actor: str
    ) -> Feedback:
        """An end user's thumbs up (``helpful``) or down on a recorded answer, with a comment."""
        if len(comment) > 2000:
            raise InvalidReviewError("a feedback comment has at most 2000 characters")
        if "\x00" in comment:
            raise InvalidReviewError("a feedback comment may not contain NUL characters")
        now = self.clock()
        with self.db.transaction() as cur:
            row = cur.execute(
                "SELECT index_name, profile FROM answers WHERE id = ?", (answer_id,)
            ).fetchone()
            if row is None:
                raise ItemNotFoundError(f"no answer has id {answer_id!r}")
            (feedback_id,) = cur.execute(
                "INSERT INTO feedback (answer_id, index_name, profile, helpful, comment, actor, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (answer_id, row[0], row[1], int(helpful), comment.strip(), actor, now),
            ).fetchone() or (0,)
        return Feedback(
            int(feedback_id), answer_id, row[0], row[1], helpful, comment.strip(), actor, now
        )

    def feedback(self, answer_id: str) -> list[Feedback]:
        with self.db.read() as cur:
            rows: list[tuple[Any, ...]] = cur.execute(
                "SELECT id, answer_id, index_name, profile, helpful, comment, actor, created_at "
                "FROM feedback WHERE answer_id = ? ORDER BY id",
                (answer_id,),
            ).fetchall()
        return [
            Feedback(int(r[0]), r[1], r[2], r[3], bool(r[4]), r[5], r[6], float(r[7])) for r in rows
        ]
