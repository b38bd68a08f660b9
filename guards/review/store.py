"""``ReviewStore``: the durable review queue and its workflow.

Every state change is one conditional ``UPDATE`` plus its audit row, committed in one transaction:
two reviewers can never both win a claim, an expired claim is claimable again, and a crash never
leaves a change without its audit row. SQLite (WAL, ``synchronous=FULL``) by default; a
``postgresql://`` URL runs the same SQL on PostgreSQL.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from guards.review import answer_cache, delivered, escalation, gold, rating_queue
from guards.review.calibrations import CalibrationBook
from guards.review.errors import (
    EscalatedElsewhereError,
    InvalidReviewError,
    ItemNotFoundError,
    ReviewConflictError,
)
from guards.review.export import DEFAULT_PAGE_SIZE, export_items, ratings_of
from guards.review.labels import LabelBook, verdict_label
from guards.review.migrations import DEFAULT_SLA_S, migrate
from guards.review.models import (
    AuditEntry,
    CachedAnswer,
    NewItem,
    Ratings,
    Resolution,
    ReviewItem,
    Status,
    priority_of,
)
from guards.review.refusal import why_no_row_matched
from guards.review.rows import COLUMNS, filters, insert_audit, item_from_row, loads, put_ratings
from guards.storage.database import Cursor, Database

logger = logging.getLogger(__name__)

_SNAPSHOT = (
    "status", "assignee", "claim_expires_at", "resolution", "edited_answer", "resolved_by",
    "escalated_by", "escalated_to",
)  # fmt: skip
_CLAIMABLE = (
    "(status IN ('pending', 'escalated') OR (status = 'claimed' AND claim_expires_at <= ?))"
)
SYSTEM = "system"
"""The actor of changes nobody made by hand (an item entering the queue)."""


class ReviewStore:
    """The review queue of one database (a SQLite path or a ``postgresql://`` URL)."""

    def __init__(
        self,
        url: str | Path,
        *,
        claim_ttl_s: float = 900.0,
        sla_s: float = DEFAULT_SLA_S,
        gold_rate: float = 0.1,
        min_ratings: int = 0,
        clock: Callable[[], float] = time.time,
    ):
        """``min_ratings``: hand resolved items to further reviewers until each has that many
        ratings (0: no such queue; see ``next_to_rate``)."""
        if claim_ttl_s <= 0 or sla_s <= 0 or not 0.0 <= gold_rate < 1.0:
            raise ValueError("need claim_ttl_s > 0, sla_s > 0 and 0 <= gold_rate < 1")
        if not 0 <= min_ratings <= 10:
            raise ValueError(f"min_ratings must be between 0 and 10, not {min_ratings}")
        self.db = Database(url)
        self.claim_ttl_s = claim_ttl_s
        self.sla_s = sla_s
        self.gold_rate = gold_rate
        self.min_ratings = min_ratings
        self.clock = clock
        self.schema_version = migrate(self.db)
        self.labels = LabelBook(self.db, clock)
        """Reviewer labels, delivered answers and end-user feedback (``guards.review.labels``)."""
        self.calibrations = CalibrationBook(self.db, clock)
        """Each collection's calibration versions and the one in force."""
        self.delivered = delivered.DeliveredAnswers(self.db, clock)
        """Answers that went out unreviewed, cached for a while (``guards.review.delivered``)."""

    def close(self) -> None:
        self.db.close()

    # Items entering the queue

    def add(self, new: NewItem) -> ReviewItem:
        """Queue an answer; committed (with its audit row) before this returns."""
        now = self.clock()
        priority = priority_of(new.confidence, new.guard_results)
        with self.db.transaction() as cur:
            item_id = self._insert(cur, new, now, priority, gold_id=None)
            self._maybe_add_gold(cur, new, now, priority)
            return self._get(cur, item_id, now)

    def _insert(
        self, cur: Cursor, new: NewItem, now: float, priority: float, gold_id: str | None
    ) -> str:
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
                now + self.sla_s,
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

    def _maybe_add_gold(self, cur: Cursor, new: NewItem, now: float, priority: float) -> None:
        """Keep gold items at ``gold_rate`` of the queue, each placed next to the item just added
        and looking like it (see ``gold.disguise``). Gold answers never reach the answer cache."""
        picked = gold.next_due(cur, self.gold_rate)
        if picked is not None:
            disguised, gold_priority = gold.disguise(picked, new, priority)
            self._insert(cur, disguised, now, gold_priority, gold_id=picked.id)

    def add_gold(
        self,
        question: str,
        answer: str,
        *,
        is_correct: bool,
        passages: list[dict[str, Any]] | None = None,
    ) -> str:
        """A question with a known-right (or known-wrong) answer, used to score reviewers.

        Adding the same question and answer again is a no-op returning the same id."""
        with self.db.transaction() as cur:
            return gold.add(cur, question, answer, is_correct, passages or [], self.clock())

    def gold_from_item(self, item_id: str, actor: str) -> str:
        """Make a resolved item a gold item (its answer right when it was approved, wrong when
        rejected or edited); the gold item's id. Recorded in the item's audit trail (which the
        API shows to admins only, as it would tell a reviewer which items are gold)."""
        now = self.clock()
        with self.db.transaction() as cur:
            gold_id, is_new = gold.from_item(cur, self._get(cur, item_id, now), now)
            if is_new:
                insert_audit(cur, item_id, actor, gold.MADE_GOLD, None, {"gold_id": gold_id}, now)
            return gold_id

    # Reading

    def get(self, item_id: str) -> ReviewItem:
        with self.db.read() as cur:
            return self._get(cur, item_id, self.clock())

    def _get(self, cur: Cursor, item_id: str, now: float) -> ReviewItem:
        row = cur.execute(f"SELECT {COLUMNS} FROM review_items WHERE id = ?", (item_id,)).fetchone()
        if row is None:
            raise ItemNotFoundError(f"no review item has id {item_id!r}")
        return item_from_row(row, now, ratings_of(cur, [item_id]).get(item_id, []))

    def list_items(
        self,
        *,
        status: Status | None = None,
        reason: str | None = None,
        assignee: str | None = None,
        min_age_s: float | None = None,
        max_age_s: float | None = None,
        is_overdue: bool | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> tuple[list[ReviewItem], int]:
        """A page of items matching every filter given, and how many match in all.

        Open items come most urgent first; resolved ones most recent first. An expired claim
        counts as pending: it is back in the queue."""
        now = self.clock()
        where, params = filters(now, status, reason, assignee, min_age_s, max_age_s, is_overdue)
        order = "resolved_at DESC" if status and not status.is_open else "priority, created_at, id"
        with self.db.read() as cur:
            total = (
                cur.execute(f"SELECT COUNT(*) FROM review_items {where}", params).fetchone() or (0,)
            )[0]
            rows = cur.execute(
                f"SELECT {COLUMNS} FROM review_items {where} ORDER BY {order} LIMIT ? OFFSET ?",
                (*params, limit, offset),
            ).fetchall()
            items = [item_from_row(r, now, []) for r in rows]
        return items, int(total)

    def export_items(
        self, status: Status | None = None, *, page_size: int = DEFAULT_PAGE_SIZE
    ) -> Iterator[ReviewItem]:
        """Every item (of one status) with its ratings, oldest first, by keyset pages: each item
        that existed when the export began comes exactly once, whatever changes meanwhile."""
        return export_items(self.db, self.clock, status, page_size=page_size)

    def audit(self, item_id: str | None = None, *, limit: int = 1000) -> list[AuditEntry]:
        """The audit log, oldest first (of one item, or of all)."""
        sql = "SELECT id, item_id, actor, action, at, before_state, after_state FROM audit_log"
        params: tuple[Any, ...] = ()
        if item_id is not None:
            sql, params = sql + " WHERE item_id = ?", (item_id,)
        with self.db.read() as cur:
            rows = cur.execute(sql + " ORDER BY id LIMIT ?", (*params, limit)).fetchall()
        return [
            AuditEntry(int(r[0]), r[1], r[2], r[3], float(r[4]), loads(r[5]), loads(r[6]))
            for r in rows
        ]

    # The workflow

    def claim(
        self, item_id: str, actor: str, *, ttl_s: float | None = None, is_admin: bool = False
    ) -> ReviewItem:
        """Reserve an item for ``actor`` until the claim expires (claiming again renews it).
        An escalated item goes to the reviewer it names, or to an admin (``is_admin``), and
        never back to the reviewer who escalated it (``EscalatedElsewhereError``)."""
        now = self.clock()
        expires = now + (ttl_s or self.claim_ttl_s)
        mine, mine_params = escalation.claim_clause(actor, is_admin)
        with self.db.transaction() as cur:
            before = self._snapshot(cur, item_id)
            updated = cur.execute(
                "UPDATE review_items SET status = 'claimed', assignee = ?, claim_expires_at = ? "
                f"WHERE id = ? AND ({_CLAIMABLE[1:-1]} OR (status = 'claimed' AND assignee = ?)) "
                f"AND {mine}",
                (actor, expires, item_id, now, actor, *mine_params),
            ).rowcount
            if not updated:
                raise why_no_row_matched(
                    self._snapshot(cur, item_id), item_id, actor, now, claiming=True
                )
            return self._changed(cur, item_id, actor, "claim", before, now)

    def claim_next(
        self, actor: str, *, ttl_s: float | None = None, is_admin: bool = False
    ) -> ReviewItem | None:
        """Claim the most urgent item ``actor`` may claim; None when there is none."""
        mine, mine_params = escalation.claim_clause(actor, is_admin)
        for _ in range(8):  # another reviewer may take the one we picked: pick again
            now = self.clock()
            with self.db.read() as cur:
                row = cur.execute(
                    f"SELECT id FROM review_items WHERE {_CLAIMABLE} AND {mine} "
                    "ORDER BY priority, created_at, id LIMIT 1",
                    (now, *mine_params),
                ).fetchone()
            if row is None:
                return None
            try:
                return self.claim(row[0], actor, ttl_s=ttl_s, is_admin=is_admin)
            except (ReviewConflictError, EscalatedElsewhereError):  # changed meanwhile
                continue
        return None

    def release(self, item_id: str, actor: str) -> ReviewItem:
        """Give a claimed item back to the queue (an escalated one stays escalated)."""
        now = self.clock()
        with self.db.transaction() as cur:
            before = self._snapshot(cur, item_id)
            updated = cur.execute(
                "UPDATE review_items SET assignee = NULL, claim_expires_at = NULL, status = "
                "CASE WHEN escalated_by IS NULL THEN 'pending' ELSE 'escalated' END "
                "WHERE id = ? AND status = 'claimed' AND assignee = ?",
                (item_id, actor),
            ).rowcount
            if not updated:
                raise why_no_row_matched(
                    self._snapshot(cur, item_id), item_id, actor, now, releasing=True
                )
            return self._changed(cur, item_id, actor, "release", before, now)

    def resolve(
        self,
        item_id: str,
        actor: str,
        action: Resolution,
        *,
        edited_answer: str | None = None,
        ratings: Ratings | None = None,
        escalate_to: str | None = None,
    ) -> ReviewItem:
        """Approve, edit, reject or escalate an item ``actor`` holds a live claim on.

        An approved or edited answer goes to the answer cache in the same transaction, so the
        same question on the same index version gets it from then on; a rejected or edited one
        is withdrawn from the delivered-answer cache (``delivered``); the verdict becomes a
        label (``labels``) in that transaction too. An escalation goes to
        ``escalate_to`` (a reviewer's name), else to the admins; see ``claim``."""
        action = Resolution(action)
        if action is Resolution.EDIT and not (edited_answer and edited_answer.strip()):
            raise InvalidReviewError("an edit needs the corrected answer (edited_answer)")
        if action is not Resolution.EDIT and edited_answer is not None:
            raise InvalidReviewError(f"only 'edit' takes an edited_answer, not {action.value!r}")
        escalating = action is Resolution.ESCALATE
        if not escalating and escalate_to is not None:
            raise InvalidReviewError(f"only 'escalate' takes escalate_to, not {action.value!r}")
        target = escalation.target_of(actor, escalate_to)
        now = self.clock()
        with self.db.transaction() as cur:
            before = self._snapshot(cur, item_id)
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
                raise why_no_row_matched(self._snapshot(cur, item_id), item_id, actor, now)
            if ratings is not None and not ratings.is_empty:
                put_ratings(cur, item_id, actor, ratings, now)
            item = self._changed(cur, item_id, actor, action.value, before, now, ratings)
            if (
                action in (Resolution.APPROVE, Resolution.EDIT)
                and item.gold_id is None
                and item.index_name
            ):
                answer_cache.put(cur, item, actor, now)
            if action in (Resolution.REJECT, Resolution.EDIT) and item.index_name:
                delivered.withdraw(cur, item, now)
            verdict_label(cur, item, actor, now)
            return item

    def next_to_rate(self, actor: str) -> ReviewItem | None:
        """The resolved item ``actor`` should rate next (oldest resolution first): one with fewer
        than ``min_ratings`` ratings that they neither resolved nor rated. Rate it with
        ``rate``; None when there is none (or ``min_ratings`` is 0)."""
        with self.db.read() as cur:
            return rating_queue.next_item(cur, actor, self.min_ratings, self.clock())

    def rate(self, item_id: str, actor: str, ratings: Ratings) -> ReviewItem:
        """A further reviewer's ratings of a resolved item (for inter-rater agreement)."""
        if ratings.is_empty:
            raise InvalidReviewError("give at least one rating or a comment")
        now = self.clock()
        with self.db.transaction() as cur:
            item = self._get(cur, item_id, now)
            if item.status.is_open:
                raise ReviewConflictError(
                    f"item {item_id} is {item.status.value}: rate it while resolving it"
                )
            put_ratings(cur, item_id, actor, ratings, now)
            return self._changed(
                cur, item_id, actor, "rate", self._snapshot(cur, item_id), now, ratings
            )

    # The answer cache

    def cached_answer(
        self, question: str, index_name: str, index_version: str
    ) -> CachedAnswer | None:
        """The reviewed answer to this question on this version of the index, if any."""
        with self.db.read() as cur:
            return answer_cache.lookup(cur, question, index_name, index_version)

    def invalidate(self, index_name: str, *, keep_version: str | None = None) -> int:
        """Forget reviewed answers of an index (except those of ``keep_version``)."""
        with self.db.transaction() as cur:
            return answer_cache.invalidate(cur, index_name, keep_version)

    # Helpers

    def _snapshot(self, cur: Cursor, item_id: str) -> dict[str, Any] | None:
        row = cur.execute(
            f"SELECT {', '.join(_SNAPSHOT)} FROM review_items WHERE id = ?", (item_id,)
        ).fetchone()
        return None if row is None else dict(zip(_SNAPSHOT, row, strict=True))

    def _changed(
        self,
        cur: Cursor,
        item_id: str,
        actor: str,
        action: str,
        before: dict[str, Any] | None,
        now: float,
        ratings: Ratings | None = None,
    ) -> ReviewItem:
        after = self._snapshot(cur, item_id)
        if after is not None and ratings is not None and not ratings.is_empty:
            after = {**after, "ratings": {n: getattr(ratings, n) for n in Ratings.__slots__}}
        insert_audit(cur, item_id, actor, action, before, after, now)
        return self._get(cur, item_id, now)
