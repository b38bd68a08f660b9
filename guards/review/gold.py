"""Gold items: questions with a known-right or known-wrong answer, mixed into the queue to score
reviewers. These functions run inside the store's transactions.

A gold item is added by hand (question, answer, right or wrong) or made from a resolved item: then
it keeps everything a reviewer sees of that item (passages, sampled answers, guard verdicts,
confidence, reasons), and the resolution says whether its answer was right (approved) or wrong
(rejected or edited). Only such a gold item looks exactly like real traffic in the queue."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from guards.review.backend import Cursor
from guards.review.errors import InvalidReviewError, ReviewConflictError
from guards.review.models import Action, ReviewItem

_COLUMNS = "id, question, answer, passages, candidates, guard_results, confidence, reasons"


@dataclass(frozen=True, slots=True)
class GoldItem:
    id: str
    question: str
    answer: str
    passages: list[dict[str, Any]]
    candidates: list[str] = field(default_factory=list)
    guard_results: list[dict[str, Any]] = field(default_factory=list)
    """Empty for a gold item added by hand: the queue then lends it its neighbour's look."""
    confidence: float | None = None
    reasons: list[str] = field(default_factory=list)


def add(
    cur: Cursor,
    question: str,
    answer: str,
    is_correct: bool,
    passages: list[dict[str, Any]],
    now: float,
) -> str:
    """Store a gold item; its id is a digest of question and answer, so adding the same pair
    again changes nothing and returns the same id."""
    if not question.strip() or not answer.strip():
        raise InvalidReviewError("a gold item needs a question and an answer")
    gold_id = _gold_id(question, answer)
    cur.execute(
        "INSERT INTO gold_items (id, question, answer, is_correct, passages, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
        (gold_id, question, answer, int(is_correct), json.dumps(passages), now),
    )
    return gold_id


def from_item(cur: Cursor, item: ReviewItem, now: float) -> str:
    """Store a resolved item as a gold item (its answer right when approved, wrong when
    rejected or edited); the same item again returns the same id."""
    if item.gold_id is not None:
        raise ReviewConflictError(f"item {item.id} is a gold item already")
    if item.resolution not in (Action.APPROVE, Action.REJECT, Action.EDIT):
        raise ReviewConflictError(
            f"item {item.id} is {item.status.value}: only an approved, rejected or edited item "
            "has a known answer"
        )
    gold_id = _gold_id(item.question, item.answer)
    cur.execute(
        "INSERT INTO gold_items (id, question, answer, is_correct, passages, created_at, "
        "candidates, guard_results, confidence, reasons, source_item_id) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
        (
            gold_id,
            item.question,
            item.answer,
            int(item.resolution is Action.APPROVE),
            json.dumps(item.passages, default=str),
            now,
            json.dumps(item.candidates),
            json.dumps(item.guard_results, default=str),
            item.confidence,
            json.dumps(item.reasons),
            item.id,
        ),
    )
    return gold_id


def next_due(cur: Cursor, gold_rate: float) -> GoldItem | None:
    """The gold item to queue next, if one more keeps gold at or below ``gold_rate`` of the
    queue: the one queued least often so far (oldest first among equals)."""
    if gold_rate <= 0:
        return None
    num_real, num_gold = cur.execute(
        "SELECT COUNT(*) - COUNT(gold_id), COUNT(gold_id) FROM review_items"
    ).fetchone() or (0, 0)
    if (num_gold + 1) / (num_real + num_gold + 1) > gold_rate:
        return None
    picked = cur.execute(
        "SELECT g.id FROM gold_items g LEFT JOIN review_items r ON r.gold_id = g.id "
        "GROUP BY g.id, g.created_at ORDER BY COUNT(r.id), g.created_at LIMIT 1"
    ).fetchone()
    if picked is None:
        return None
    row = cur.execute(f"SELECT {_COLUMNS} FROM gold_items WHERE id = ?", picked).fetchone()
    assert row is not None
    return GoldItem(
        row[0],
        row[1],
        row[2],
        json.loads(row[3]),
        candidates=json.loads(row[4]),
        guard_results=json.loads(row[5]),
        confidence=row[6],
        reasons=json.loads(row[7]),
    )


def _gold_id(question: str, answer: str) -> str:
    return hashlib.sha256(f"{question}\0{answer}".encode()).hexdigest()[:32]
