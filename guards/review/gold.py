"""Gold items: questions with a known-right or known-wrong answer, mixed into the queue to score
reviewers. These functions run inside the store's transactions.

A gold item is added by hand (question, answer, right or wrong) or made from a resolved item: then
it keeps everything a reviewer sees of that item (passages, sampled answers, guard verdicts,
confidence, reasons), and the resolution says whether its answer was right (approved) or wrong
(rejected or edited). Only such a gold item looks exactly like real traffic in the queue."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from guards.review.errors import InvalidReviewError, ReviewConflictError
from guards.review.models import NewItem, Resolution, ReviewItem, priority_of
from guards.storage.database import Cursor

MADE_GOLD = "made_gold"
"""The audit action on the item a gold item was made from (shown to admins only)."""
_COLUMNS = (
    "id, question, answer, passages, candidates, guard_results, confidence, reasons, source_item_id"
)


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
    source_item_id: str | None = None
    """The resolved item it was made from; None when added by hand."""


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


def from_item(cur: Cursor, item: ReviewItem, now: float) -> tuple[str, bool]:
    """Store a resolved item as a gold item (its answer right when approved, wrong when
    rejected or edited): (its id, whether it is new). The same item again returns the same id;
    a gold item with the same question and answer but the other verdict is a conflict."""
    if item.gold_id is not None:
        raise ReviewConflictError(f"item {item.id} is a gold item already")
    if item.resolution not in (Resolution.APPROVE, Resolution.REJECT, Resolution.EDIT):
        raise ReviewConflictError(
            f"item {item.id} is {item.status.value}: only an approved, rejected or edited item "
            "has a known answer"
        )
    gold_id = _gold_id(item.question, item.answer)
    is_correct = item.resolution is Resolution.APPROVE
    existing = cur.execute("SELECT is_correct FROM gold_items WHERE id = ?", (gold_id,)).fetchone()
    if existing is not None:
        if bool(existing[0]) != is_correct:
            raise ReviewConflictError(
                f"a gold item with this question and answer already counts the answer as "
                f"{'right' if existing[0] else 'wrong'}; item {item.id} was "
                f"{item.status.value}"
            )
        return gold_id, False
    cur.execute(
        "INSERT INTO gold_items (id, question, answer, is_correct, passages, created_at, "
        "candidates, guard_results, confidence, reasons, source_item_id) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
        (
            gold_id,
            item.question,
            item.answer,
            int(is_correct),
            json.dumps(item.passages, default=str),
            now,
            json.dumps(item.candidates),
            json.dumps(item.guard_results, default=str),
            item.confidence,
            json.dumps(item.reasons),
            item.id,
        ),
    )
    return gold_id, True


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
    if row is None:  # deleted between the two reads: impossible inside one transaction
        return None
    return GoldItem(
        row[0],
        row[1],
        row[2],
        json.loads(row[3]),
        candidates=json.loads(row[4]),
        guard_results=json.loads(row[5]),
        confidence=row[6],
        reasons=json.loads(row[7]),
        source_item_id=row[8],
    )


def disguise(picked: GoldItem, new: NewItem, priority: float) -> tuple[NewItem, float]:
    """The queue item (and its priority) for ``picked``, placed next to the item ``new``: with
    that item's index and index version and a request id of its own. A gold item made from a
    resolved item brings its own samples, verdicts, confidence and reasons; one added by hand
    borrows the new item's confidence, reasons and priority."""
    made_from_item = picked.source_item_id is not None
    item = NewItem(
        picked.question,
        picked.answer,
        candidates=picked.candidates,
        passages=picked.passages,
        guard_results=picked.guard_results,
        confidence=picked.confidence if made_from_item else new.confidence,
        reasons=picked.reasons if made_from_item else new.reasons,
        index_name=new.index_name,
        index_version=new.index_version,
        request_id=uuid.uuid4().hex,
    )
    if made_from_item:
        priority = priority_of(item.confidence, item.guard_results)
    return item, priority


def _gold_id(question: str, answer: str) -> str:
    """A digest of question and answer: the same pair is one gold item however often added."""
    return hashlib.sha256(f"{question}\0{answer}".encode()).hexdigest()[:32]
