"""Gold items: questions with a known-right or known-wrong answer, mixed into the queue to score
reviewers. These functions run inside the store's transactions."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from guards.review.backend import Cursor
from guards.review.errors import InvalidReviewError


@dataclass(frozen=True, slots=True)
class GoldItem:
    id: str
    question: str
    answer: str
    passages: list[dict[str, Any]]


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
    gold_id = hashlib.sha256(f"{question}\0{answer}".encode()).hexdigest()[:32]
    cur.execute(
        "INSERT INTO gold_items VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
        (gold_id, question, answer, int(is_correct), json.dumps(passages), now),
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
    row = cur.execute(
        "SELECT g.id, g.question, g.answer, g.passages FROM gold_items g "
        "LEFT JOIN review_items r ON r.gold_id = g.id "
        "GROUP BY g.id, g.question, g.answer, g.passages, g.created_at "
        "ORDER BY COUNT(r.id), g.created_at LIMIT 1"
    ).fetchone()
    return None if row is None else GoldItem(row[0], row[1], row[2], json.loads(row[3]))
