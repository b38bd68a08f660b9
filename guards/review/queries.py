"""Reading the queue: one item with its ratings, a filtered page of items, the audit log.
These functions run inside the store's read (or write) transactions (``guards.review.store``)."""

from __future__ import annotations

from typing import Any

from guards.review.errors import ItemNotFoundError
from guards.review.export import ratings_of
from guards.review.models import AuditEntry, ReviewItem, Status
from guards.review.rows import COLUMNS, filters, item_from_row, loads
from guards.storage.database import Cursor


def get_item(cur: Cursor, item_id: str, now: float) -> ReviewItem:
    """The item with its ratings; ``ItemNotFoundError`` when there is none."""
    row = cur.execute(f"SELECT {COLUMNS} FROM review_items WHERE id = ?", (item_id,)).fetchone()
    if row is None:
        raise ItemNotFoundError(f"no review item has id {item_id!r}")
    return item_from_row(row, now, ratings_of(cur, [item_id]).get(item_id, []))


def list_page(
    cur: Cursor,
    now: float,
    status: Status | None,
    reason: str | None,
    assignee: str | None,
    min_age_s: float | None,
    max_age_s: float | None,
    is_overdue: bool | None,
    offset: int,
    limit: int,
) -> tuple[list[ReviewItem], int]:
    """A page of items matching every filter given (without their ratings), and how many match
    in all: open items most urgent first, resolved ones most recent first."""
    where, params = filters(now, status, reason, assignee, min_age_s, max_age_s, is_overdue)
    order = "resolved_at DESC" if status and not status.is_open else "priority, created_at, id"
    counted = cur.execute(f"SELECT COUNT(*) FROM review_items {where}", params).fetchone()
    total = counted[0] if counted is not None else 0
    rows = cur.execute(
        f"SELECT {COLUMNS} FROM review_items {where} ORDER BY {order} LIMIT ? OFFSET ?",
        (*params, limit, offset),
    ).fetchall()
    return [item_from_row(r, now, []) for r in rows], int(total)


def audit_entries(cur: Cursor, item_id: str | None, limit: int) -> list[AuditEntry]:
    """The audit log, oldest first (of one item, or of all)."""
    sql = "SELECT id, item_id, actor, action, at, before_state, after_state FROM audit_log"
    params: tuple[Any, ...] = ()
    if item_id is not None:
        sql, params = sql + " WHERE item_id = ?", (item_id,)
    rows = cur.execute(sql + " ORDER BY id LIMIT ?", (*params, limit)).fetchall()
    return [
        AuditEntry(int(r[0]), r[1], r[2], r[3], float(r[4]), loads(r[5]), loads(r[6])) for r in rows
    ]
