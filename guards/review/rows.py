"""Rows of the review tables to and from ``ReviewItem``; the filters of ``list_items`` as SQL;
the rows every change writes (ratings, the audit log)."""

from __future__ import annotations

import json
from typing import Any

from guards.review.models import Rating, Ratings, Resolution, ReviewItem, Status
from guards.storage.database import Cursor

COLUMNS = (
    "id, question, answer, candidates, passages, guard_results, confidence, reasons, priority, "
    "created_at, deadline, status, assignee, claim_expires_at, resolution, edited_answer, "
    "resolved_by, resolved_at, index_name, index_version, request_id, gold_id, escalated_by, "
    "escalated_to, kind, propensity, signals, shipped_confidence, profile, uniform"
)
"""The columns of ``review_items`` in the order ``item_from_row`` reads them."""
RATING_COLUMNS = "item_id, reviewer, relevance, fluency, usefulness, comment, created_at"
"""The columns of ``ratings`` in the order ``rating_from_row`` reads them."""


def filters(
    now: float,
    status: Status | None,
    reason: str | None = None,
    assignee: str | None = None,
    min_age_s: float | None = None,
    max_age_s: float | None = None,
    is_overdue: bool | None = None,
) -> tuple[str, tuple[Any, ...]]:
    clauses: list[str] = []
    params: list[Any] = []
    if status in (Status.PENDING, Status.ESCALATED):  # an expired claim is back where it was
        escalated = "NOT NULL" if status is Status.ESCALATED else "NULL"
        clauses.append(
            f"(status = ? OR (status = 'claimed' AND claim_expires_at <= ? "
            f"AND escalated_by IS {escalated}))"
        )
        params += [status.value, now]
    elif status is Status.CLAIMED:
        clauses.append("status = 'claimed' AND claim_expires_at > ?")
        params.append(now)
    elif status is not None:
        clauses.append("status = ?")
        params.append(status.value)
    if reason:
        clauses.append("LOWER(reasons) LIKE ?")
        params.append(f"%{reason.lower()}%")
    if assignee:
        clauses.append("assignee = ? AND status = 'claimed' AND claim_expires_at > ?")
        params += [assignee, now]
    if min_age_s is not None:
        clauses.append("created_at <= ?")
        params.append(now - min_age_s)
    if max_age_s is not None:
        clauses.append("created_at >= ?")
        params.append(now - max_age_s)
    if is_overdue is not None:
        open_ = "(status IN ('pending', 'claimed', 'escalated') AND deadline < ?)"
        clauses.append(open_ if is_overdue else f"NOT {open_}")
        params.append(now)
    return ("WHERE " + " AND ".join(clauses) if clauses else ""), tuple(params)


def item_from_row(row: tuple[Any, ...], now: float, ratings: list[Rating]) -> ReviewItem:
    status, assignee, expires = Status(row[11]), row[12], row[13]
    if status is Status.CLAIMED and (expires is None or expires <= now):
        # An expired claim is back in the queue (among the escalations, if it was escalated).
        status, assignee = (Status.PENDING if row[22] is None else Status.ESCALATED), None
    return ReviewItem(
        id=row[0],
        question=row[1],
        answer=row[2],
        candidates=json.loads(row[3]),
        passages=json.loads(row[4]),
        guard_results=json.loads(row[5]),
        confidence=row[6],
        reasons=json.loads(row[7]),
        priority=float(row[8]),
        created_at=float(row[9]),
        deadline=float(row[10]),
        status=status,
        assignee=assignee,
        claim_expires_at=expires if status is Status.CLAIMED else None,
        resolution=Resolution(row[14]) if row[14] else None,
        edited_answer=row[15],
        resolved_by=row[16],
        resolved_at=row[17],
        index_name=row[18],
        index_version=row[19],
        request_id=row[20],
        gold_id=row[21],
        ratings=ratings,
        escalated_by=row[22],
        escalated_to=row[23],
        kind=row[24],
        propensity=float(row[25]),
        signals=json.loads(row[26]),
        shipped_confidence=row[27],
        profile=row[28],
        uniform=bool(row[29]),
    )


def rating_from_row(row: tuple[Any, ...]) -> Rating:
    return Rating(row[0], row[1], Ratings(row[2], row[3], row[4], row[5]), float(row[6]))


def put_ratings(cur: Cursor, item_id: str, actor: str, r: Ratings, now: float) -> None:
    """``actor``'s ratings of the item (replacing any they gave before)."""
    cur.execute(
        "INSERT INTO ratings VALUES (?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (item_id, reviewer) DO UPDATE SET relevance = excluded.relevance, "
        "fluency = excluded.fluency, usefulness = excluded.usefulness, "
        "comment = excluded.comment, created_at = excluded.created_at",
        (item_id, actor, r.relevance, r.fluency, r.usefulness, r.comment, now),
    )


def insert_audit(
    cur: Cursor,
    item_id: str,
    actor: str,
    action: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    now: float,
) -> None:
    """One line of the append-only audit log."""
    cur.execute(
        "INSERT INTO audit_log (item_id, actor, action, at, before_state, after_state) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (item_id, actor, action, now, dumps(before), dumps(after)),
    )


def dumps(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, default=str)


def loads(text: str | None) -> dict[str, Any] | None:
    return None if text is None else dict(json.loads(text))
