"""``ReviewStore``: the durable review queue and its workflow.

Every state change is one conditional ``UPDATE`` plus its audit row, committed in one transaction:
two reviewers can never both win a claim, an expired claim is claimable again, and a crash never
leaves a change without its audit row. SQLite (WAL, ``synchronous=FULL``) by default; a
``postgresql://`` URL runs the same SQL on PostgreSQL.

The store opens the database, migrates it and holds the settings; each method is one transaction
around the SQL of its part of the queue: items entering it (``intake``, ``gold``), reading it
(``queries``, ``export``), the workflow (``workflow``, ``rating_queue``), the answer cache
(``answer_cache``), and the books beside it (``labels``, ``calibrations``, ``delivered``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from guards.review import answer_cache, delivered, gold, intake, queries, rating_queue, workflow
from guards.review.calibrations import CalibrationBook
from guards.review.errors import EscalatedElsewhereError, InvalidReviewError, ReviewConflictError
from guards.review.export import DEFAULT_PAGE_SIZE, export_items
from guards.review.labels import LabelBook
from guards.review.migrations import DEFAULT_SLA_S, migrate
from guards.review.models import (
    AuditEntry,
    CachedAnswer,
    NewItem,
    Ratings,
    Resolution,
    ReviewItem,
    Status,
)
from guards.review.rows import insert_audit
from guards.storage.database import Database


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
        """Queue an answer; committed (with its audit row) before this returns. A gold item may
        join the queue beside it (see ``gold_rate`` and ``intake``)."""
        now = self.clock()
        with self.db.transaction() as cur:
            item_id = intake.add(cur, new, now, self.sla_s, self.gold_rate)
            return queries.get_item(cur, item_id, now)

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
            gold_id, is_new = gold.from_item(cur, queries.get_item(cur, item_id, now), now)
            if is_new:
                insert_audit(cur, item_id, actor, gold.MADE_GOLD, None, {"gold_id": gold_id}, now)
            return gold_id

    # Reading

    def get(self, item_id: str) -> ReviewItem:
        with self.db.read() as cur:
            return queries.get_item(cur, item_id, self.clock())

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
        with self.db.read() as cur:
            return queries.list_page(
                cur, now, status, reason, assignee, min_age_s, max_age_s, is_overdue, offset, limit
            )

    def export_items(
        self, status: Status | None = None, *, page_size: int = DEFAULT_PAGE_SIZE
    ) -> Iterator[ReviewItem]:
        """Every item (of one status) with its ratings, oldest first, by keyset pages: each item
        that existed when the export began comes exactly once, whatever changes meanwhile."""
        return export_items(self.db, self.clock, status, page_size=page_size)

    def audit(self, item_id: str | None = None, *, limit: int = 1000) -> list[AuditEntry]:
        """The audit log, oldest first (of one item, or of all)."""
        with self.db.read() as cur:
            return queries.audit_entries(cur, item_id, limit)

    # The workflow

    def claim(
        self, item_id: str, actor: str, *, ttl_s: float | None = None, is_admin: bool = False
    ) -> ReviewItem:
        """Reserve an item for ``actor`` until the claim expires (claiming again renews it).
        An escalated item goes to the reviewer it names, or to an admin (``is_admin``), and
        never back to the reviewer who escalated it (``EscalatedElsewhereError``)."""
        now = self.clock()
        expires = now + (ttl_s or self.claim_ttl_s)
        with self.db.transaction() as cur:
            return workflow.claim(cur, item_id, actor, expires, now, is_admin)

    def claim_next(
        self, actor: str, *, ttl_s: float | None = None, is_admin: bool = False
    ) -> ReviewItem | None:
        """Claim the most urgent item ``actor`` may claim; None when there is none."""
        for _ in range(8):  # another reviewer may take the one we picked: pick again
            now = self.clock()
            with self.db.read() as cur:
                item_id = workflow.most_urgent_claimable(cur, actor, is_admin, now)
            if item_id is None:
                return None
            try:
                return self.claim(item_id, actor, ttl_s=ttl_s, is_admin=is_admin)
            except (ReviewConflictError, EscalatedElsewhereError):  # changed meanwhile
                continue
        return None

    def release(self, item_id: str, actor: str) -> ReviewItem:
        """Give a claimed item back to the queue (an escalated one stays escalated)."""
        now = self.clock()
        with self.db.transaction() as cur:
            return workflow.release(cur, item_id, actor, now)

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
        target = workflow.check_resolution(actor, action, edited_answer, escalate_to)
        now = self.clock()
        with self.db.transaction() as cur:
            return workflow.resolve(
                cur, item_id, actor, action, edited_answer, ratings, target, now
            )

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
            return workflow.rate(cur, item_id, actor, ratings, now)

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
