"""Answers the policy sends to people: a durable queue with claims, resolutions, ratings, an
append-only audit log, gold items to score reviewers, and the cache of reviewed answers."""

from guards.review.agreement import krippendorff_alpha
from guards.review.errors import (
    AlreadyResolvedError,
    ClaimConflictError,
    ClaimExpiredError,
    EscalatedElsewhereError,
    InvalidReviewError,
    ItemNotFoundError,
    NotClaimedError,
    ReviewConflictError,
    ReviewError,
)
from guards.review.models import (
    RATING_SCALES,
    AuditEntry,
    CachedAnswer,
    NewItem,
    Rating,
    Ratings,
    Resolution,
    ReviewItem,
    Status,
    normalize_question,
)
from guards.review.quality import QueueStats, ReviewerStats, queue_stats
from guards.review.store import ReviewStore

__all__ = [
    "RATING_SCALES",
    "AlreadyResolvedError",
    "AuditEntry",
    "CachedAnswer",
    "ClaimConflictError",
    "ClaimExpiredError",
    "EscalatedElsewhereError",
    "InvalidReviewError",
    "ItemNotFoundError",
    "NewItem",
    "NotClaimedError",
    "QueueStats",
    "Rating",
    "Ratings",
    "Resolution",
    "ReviewConflictError",
    "ReviewError",
    "ReviewItem",
    "ReviewStore",
    "ReviewerStats",
    "Status",
    "krippendorff_alpha",
    "normalize_question",
    "queue_stats",
]
