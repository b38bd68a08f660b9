"""The review workflow's state changes: claim, release, resolve (approve, edit, reject,
escalate) and rate. These functions run inside the store's write transactions
(``guards.review.store``).

Each change is one conditional ``UPDATE`` (the item must be in a state that allows it; when no
row matches, ``guards.review.refusal`` says why) followed by its audit row, which records the
item's state before and after."""

from __future__ import annotations

from typing import Any

from guards.review import answer_cache, delivered, escalation
from guards.review.errors import InvalidReviewError, ReviewConflictError
from guards.review.labels import verdict_label
from guards.review.models import Ratings, Resolution, ReviewItem
from guards.review.queries import get_item
from guards.review.refusal import why_no_row_matched
from guards.review.rows import insert_audit, put_ratings
from guards.storage.database import Cursor

SNAPSHOT = (
    "status", "assignee", "claim_expires_at", "resolution", "edited_answer", "resolved_by",
    "escalated_by", "escalated_to",
)  # fmt: skip
"""The columns the audit log records before and after each change."""
CLAIMABLE = "(status IN ('pending', 'escalated') OR (status = 'claimed' AND claim_expires_at <= ?))"
"""Open and unclaimed, or claimed with the claim expired (its parameter: now)."""


def claim(
    cur: Cursor, item_id: str, actor: str, expires: float, now: float, is_admin: bool
) -> ReviewItem:
    """Claim the item for ``actor`` until ``expires`` (renewing a claim they hold)."""
    mine, mine_params = escalation.claim_clause(actor, is_admin)
    before = snapshot(cur, item_id)
    updated = cur.execute(
        "UPDATE review_items SET status = 'claimed', assignee = ?, claim_expires_at = ? "
        f"WHERE id = ? AND ({CLAIMABLE[1:-1]} OR (status = 'claimed' AND assignee = ?)) "
        f"AND {mine}",
        (actor, expires, item_id, now, actor, *mine_params),
    ).rowcount
    if not updated:
        raise why_no_row_matched(snapshot(cur, item_id), item_id, actor, now, claiming=True)
    return record_change(cur, item_id, actor, "claim", before, now)


def most_urgent_claimable(cur: Cursor, actor: str, is_admin: bool, now: float) -> str | None:
    """The id of the most urgent item ``actor`` may claim now; None when there is none."""
    mine, mine_params = escalation.claim_clause(actor, is_admin)
    row = cur.execute(
        f"SELECT id FROM review_items WHERE {CLAIMABLE} AND {mine} "
        "ORDER BY priority, created_at, id LIMIT 1",
        (now, *mine_params),
    ).fetchone()
    return None if row is None else str(row[0])


def release(cur: Cursor, item_id: str, actor: str, now: float) -> ReviewItem:
    """Give ``actor``'s claimed item back to the queue (an escalated one stays escalated)."""
    before = snapshot(cur, item_id)
    updated = cur.execute(
        "UPDATE review_items SET assignee = NULL, claim_expires_at = NULL, status = "
        "CASE WHEN escalated_by IS NULL THEN 'pending' ELSE 'escalated' END "
        "WHERE id = ? AND status = 'claimed' AND assignee = ?",
        (item_id, actor),
    ).rowcount
    if not updated:
        raise why_no_row_matched(snapshot(cur, item_id), item_id, actor, now, releasing=True)
    return record_change(cur, item_id, actor, "release", before, now)


def check_resolution(
    actor: str, action: Resolution, edited_answer: str | None, escalate_to: str | None
) -> str | None:
    """Refuse a resolution whose arguments do not fit its action; the reviewer an escalation
    names (None: the admins, or no escalation)."""
    if action is Resolution.EDIT and not (edited_answer and edited_answer.strip()):
        raise InvalidReviewError("an edit needs the corrected answer (edited_answer)")
    if action is not Resolution.EDIT and edited_answer is not None:
        raise InvalidReviewError(f"only 'edit' takes an edited_answer, not {action.value!r}")
    if action is not Resolution.ESCALATE and escalate_to is not None:
        raise InvalidReviewError(f"only 'escalate' takes escalate_to, not {action.value!r}")
    return escalation.target_of(actor, escalate_to)


def resolve(
    cur: Cursor,
    item_id: str,
    actor: str,
    action: Resolution,
    edited_answer: str | None,
    ratings: Ratings | None,
    target: str | None,
    now: float,
) -> ReviewItem:
    """Resolve (or escalate to ``target``) an item ``actor`` holds a live claim on, with what
    follows from the verdict: the answer cache, the delivered-answer cache and the label."""
    escalating = action is Resolution.ESCALATE
    before = snapshot(cur, item_id)
    updated = cur.execute(
        "UPDATE review_items SET status = ?, resolution = ?, edited_answer = ?, "
        "resolved_by = ?, resolved_at = ?, assignee = ?, claim_expires_at = NULL"
        + (", escalated_by = ?, escalated_to = ?" if escalating else "")
        + " WHERE id = ? AND status = 'claimed' AND assignee = ? AND claim_expires_at > ?",
        (
            action.status.value,
            action.value,
            edited_answer.strip() if edited_answer else None,
            actor,
            None if escalating else now,
            None if escalating else actor,
            *((actor, target) if escalating else ()),
            item_id,
            actor,
            now,
        ),
    ).rowcount
    if not updated:
        raise why_no_row_matched(snapshot(cur, item_id), item_id, actor, now)
    if ratings is not None and not ratings.is_empty:
        put_ratings(cur, item_id, actor, ratings, now)
    item = record_change(cur, item_id, actor, action.value, before, now, ratings)
    if action in (Resolution.APPROVE, Resolution.EDIT) and item.gold_id is None and item.index_name:
        answer_cache.put(cur, item, actor, now)
    if action in (Resolution.REJECT, Resolution.EDIT) and item.index_name:
        delivered.withdraw(cur, item, now)
    verdict_label(cur, item, actor, now)
    return item


def rate(cur: Cursor, item_id: str, actor: str, ratings: Ratings, now: float) -> ReviewItem:
    """A further reviewer's ratings (not empty) of a resolved item."""
    item = get_item(cur, item_id, now)
    if item.status.is_open:
        raise ReviewConflictError(
            f"item {item_id} is {item.status.value}: rate it while resolving it"
        )
    put_ratings(cur, item_id, actor, ratings, now)
    return record_change(cur, item_id, actor, "rate", snapshot(cur, item_id), now, ratings)


def snapshot(cur: Cursor, item_id: str) -> dict[str, Any] | None:
    """The item's workflow state (``SNAPSHOT``); None when there is no such item."""
    row = cur.execute(
        f"SELECT {', '.join(SNAPSHOT)} FROM review_items WHERE id = ?", (item_id,)
    ).fetchone()
    return None if row is None else dict(zip(SNAPSHOT, row, strict=True))


def record_change(
    cur: Cursor,
    item_id: str,
    actor: str,
    action: str,
    before: dict[str, Any] | None,
    now: float,
    ratings: Ratings | None = None,
) -> ReviewItem:
    """The audit row of a change just made (the state before, the state after with any
    ratings given), and the item as it now is."""
    after = snapshot(cur, item_id)
    if after is not None and ratings is not None and not ratings.is_empty:
        after = {**after, "ratings": {n: getattr(ratings, n) for n in Ratings.__slots__}}
    insert_audit(cur, item_id, actor, action, before, after, now)
    return get_item(cur, item_id, now)
