"""Items entering the queue: an answer the policy sends to review, and the gold items mixed in
beside it. These functions run inside the store's transactions (``guards.review.store``)."""

from __future__ import annotations

import json
import uuid

from guards.review import gold
from guards.review.models import NewItem, priority_of
from guards.review.rows import insert_audit
from guards.storage.database import Cursor

SYSTEM = "system"
"""The actor of changes nobody made by hand (an item entering the queue)."""


def add(cur: Cursor, new: NewItem, now: float, sla_s: float, gold_rate: float) -> str:
    """Queue an answer, due ``sla_s`` from now, and a gold item beside it when one is due; the
    answer's item id."""
    priority = priority_of(new.confidence, new.guard_results)
    item_id = insert(cur, new, now, priority, sla_s, gold_id=None)
    _maybe_add_gold(cur, new, now, priority, sla_s, gold_rate)
    return item_id


def insert(
    cur: Cursor, new: NewItem, now: float, priority: float, sla_s: float, gold_id: str | None
) -> str:
    """One pending item (a gold item's disguise when ``gold_id`` is set) and its audit row."""
    item_id = uuid.uuid4().hex
    cur.execute(
        "INSERT INTO review_items (id, created_at, status, question, answer, payload, "
        "candidates, passages, guard_results, reasons, confidence, priority, deadline, "
        "index_name, index_version, request_id, gold_id, kind, propensity, signals, "
        "shipped_confidence, profile, uniform) "
        f"VALUES (?, ?, 'pending', ?, ?, '{{}}', {', '.join('?' * 17)})",
        (
            item_id,
            now,
            new.question,
            new.answer,
            json.dumps(new.candidates),
            json.dumps(new.passages, default=str),
            json.dumps(new.guard_results, default=str),
            json.dumps(new.reasons),
            new.confidence,
            priority,
            now + sla_s,
            new.index_name,
            new.index_version,
            new.request_id,
            gold_id,
            new.kind,
            new.propensity,
            json.dumps(new.signals),
            new.shipped_confidence,
            new.profile,
            int(new.uniform),
        ),
    )
    insert_audit(cur, item_id, SYSTEM, "created", None, {"status": "pending"}, now)
    return item_id


def _maybe_add_gold(
    cur: Cursor, new: NewItem, now: float, priority: float, sla_s: float, gold_rate: float
) -> None:
    """Keep gold items at ``gold_rate`` of the queue, each placed next to the item just added
    and looking like it (see ``gold.disguise``). Gold answers never reach the answer cache."""
    picked = gold.next_due(cur, gold_rate)
    if picked is not None:
        disguised, gold_priority = gold.disguise(picked, new, priority)
        insert(cur, disguised, now, gold_priority, sla_s, gold_id=picked.id)
