"""How well the queue and its reviewers do: counts, gold-item accuracy, agreement, per reviewer.

Gold items are questions with known answers mixed into the queue. Approving a right answer, or
rejecting or editing a wrong one, scores as correct; escalating is not scored.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from guards.review import rating_queue
from guards.review.agreement import krippendorff_alpha
from guards.review.models import RATING_SCALES
from guards.review.store import ReviewStore


@dataclass(slots=True)
class ReviewerStats:
    """One reviewer's work."""

    reviewer: str
    num_resolved: int = 0
    by_action: dict[str, int] = field(default_factory=dict)
    num_gold: int = 0
    num_gold_correct: int = 0
    mean_ratings: dict[str, float | None] = field(default_factory=dict)
    median_resolve_s: float | None = None
    alpha_without: dict[str, float | None] = field(default_factory=dict)
    """Krippendorff's alpha per scale with this reviewer's ratings left out: above the queue's
    alpha, the reviewer lowers agreement (the seed design drops such reviewers)."""

    @property
    def gold_accuracy(self) -> float | None:
        return self.num_gold_correct / self.num_gold if self.num_gold else None


@dataclass(slots=True)
class QueueStats:
    by_status: dict[str, int]
    num_overdue: int
    num_multiply_rated: int
    """Items rated by two or more reviewers: the ones agreement is measured on."""
    agreement: dict[str, float | None]
    """Krippendorff's alpha (ordinal) per rating scale; None until it is defined."""
    reviewers: list[ReviewerStats]
    num_needing_ratings: int = 0
    """Resolved items with fewer ratings than the store's ``min_ratings``."""


def queue_stats(store: ReviewStore) -> QueueStats:
    now = store.clock()
    with store.db.read() as cur:
        statuses = cur.execute(
            "SELECT CASE WHEN status = 'claimed' AND claim_expires_at <= ? THEN "
            "(CASE WHEN escalated_by IS NULL THEN 'pending' ELSE 'escalated' END) "
            "ELSE status END AS s, COUNT(*) FROM review_items GROUP BY s",
            (now,),
        ).fetchall()
        num_overdue = (
            cur.execute(
                "SELECT COUNT(*) FROM review_items WHERE status IN ('pending', 'claimed', "
                "'escalated') AND deadline < ?",
                (now,),
            ).fetchone()
            or (0,)
        )[0]
        resolved = cur.execute(
            "SELECT r.resolved_by, r.resolution, r.resolved_at - r.created_at, g.is_correct "
            "FROM review_items r LEFT JOIN gold_items g ON g.id = r.gold_id "
            "WHERE r.resolved_at IS NOT NULL"
        ).fetchall()
        ratings = cur.execute(
            "SELECT item_id, reviewer, relevance, fluency, usefulness FROM ratings"
        ).fetchall()
        num_needing = rating_queue.num_needing(cur, store.min_ratings)
    by_status: dict[str, int] = defaultdict(int)
    for status, count in statuses:
        by_status[status] += int(count)
    reviewers: dict[str, ReviewerStats] = {}
    durations: dict[str, list[float]] = defaultdict(list)
    for reviewer, resolution, took_s, is_correct in resolved:
        stats = reviewers.setdefault(reviewer, ReviewerStats(reviewer))
        stats.num_resolved += 1
        stats.by_action[resolution] = stats.by_action.get(resolution, 0) + 1
        durations[reviewer].append(float(took_s))
        if is_correct is not None and resolution != "escalate":
            stats.num_gold += 1
            stats.num_gold_correct += int((resolution == "approve") == bool(is_correct))
    for reviewer, spans in durations.items():
        spans.sort()
        reviewers[reviewer].median_resolve_s = spans[len(spans) // 2]
    # scale -> item -> reviewer -> value
    units: dict[str, dict[str, dict[str, Any]]] = {n: defaultdict(dict) for n in RATING_SCALES}
    given: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for item_id, reviewer, *values in ratings:
        for name, value in zip(RATING_SCALES, values, strict=True):
            units[name][item_id][reviewer] = value
            if value is not None:
                given[reviewer][name].append(int(value))
    for reviewer, scales in given.items():
        stats = reviewers.setdefault(reviewer, ReviewerStats(reviewer))
        stats.mean_ratings = {
            n: (sum(scales[n]) / len(scales[n]) if scales[n] else None) for n in RATING_SCALES
        }
        stats.alpha_without = {n: _alpha(units[n], without=reviewer) for n in RATING_SCALES}
    multiply_rated = {i for i, vs in units["relevance"].items() if len(vs) >= 2}
    return QueueStats(
        by_status=dict(by_status),
        num_overdue=int(num_overdue),
        num_multiply_rated=len(multiply_rated),
        agreement={n: _alpha(units[n]) for n in RATING_SCALES},
        reviewers=sorted(reviewers.values(), key=lambda s: s.reviewer),
        num_needing_ratings=num_needing,
    )


def _alpha(by_item: dict[str, dict[str, Any]], without: str | None = None) -> float | None:
    """Ordinal Krippendorff's alpha over the items' ratings, leaving ``without``'s out."""
    return krippendorff_alpha(
        [[v for who, v in raters.items() if who != without] for raters in by_item.values()],
        "ordinal",
    )
