"""HTTP bodies of the review API (``/v1/reviews``) and the key API (``/v1/keys``)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Literal

from pydantic import BaseModel, Field

from guards.review import QueueStats, Ratings
from rag.review_desk.views import ReviewOut
from rag.server.schemas import StrictRequest


class RatingsIn(StrictRequest):
    """The human-evaluation scales; each optional."""

    relevance: int | None = Field(None, ge=0, le=3, description="0 irrelevant … 3 on point")
    fluency: int | None = Field(None, ge=0, le=2, description="0 broken … 2 fluent")
    usefulness: int | None = Field(None, ge=0, le=4, description="0 useless … 4 fully answers")

    def to_ratings(self, comment: str) -> Ratings:
        return Ratings(self.relevance, self.fluency, self.usefulness, comment)


class ClaimIn(StrictRequest):
    ttl_s: float | None = Field(
        None, gt=0, le=24 * 3600, description="claim length; default the server's"
    )


class ResolveIn(StrictRequest):
    """What the reviewer decided, with their ratings and comment."""

    action: Literal["approve", "edit", "reject", "escalate"]
    edited_answer: str | None = Field(
        None, max_length=20_000, description="the corrected answer; only with 'edit'"
    )
    ratings: RatingsIn = Field(default_factory=RatingsIn)
    comment: str = Field("", max_length=5000)
    escalate_to: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="only with 'escalate': the reviewer to hand the item to (default: the admins)",
    )


class RateIn(StrictRequest):
    """A further reviewer's ratings of a resolved item."""

    ratings: RatingsIn
    comment: str = Field("", max_length=5000)


class GoldIn(StrictRequest):
    question: str = Field(..., min_length=1, max_length=5000)
    answer: str = Field(..., min_length=1, max_length=20_000)
    correct: bool = Field(..., description="is the answer right? (approving it is then correct)")


class ReviewList(BaseModel):
    total: int
    offset: int
    limit: int
    items: list[ReviewOut]


class ReviewerStatsOut(BaseModel):
    reviewer: str
    num_resolved: int
    by_action: dict[str, int]
    num_gold: int | None = Field(None, description="gold items resolved (admins only)")
    num_gold_correct: int | None = None
    gold_accuracy: float | None = None
    mean_ratings: dict[str, float | None]
    median_resolve_s: float | None
    alpha_without: dict[str, float | None] = Field(
        default_factory=dict,
        description="Krippendorff's alpha per scale without this reviewer's ratings: above the "
        "queue's, they lower agreement",
    )


class StatsOut(BaseModel):
    by_status: dict[str, int]
    num_overdue: int
    num_multiply_rated: int
    agreement: dict[str, float | None] = Field(
        ..., description="Krippendorff's alpha (ordinal) per rating scale"
    )
    reviewers: list[ReviewerStatsOut]
    num_needing_ratings: int = Field(
        0, description="resolved items with fewer than RAGGUARD_REVIEW_MIN_RATINGS ratings"
    )

    @classmethod
    def from_stats(cls, stats: QueueStats, *, show_gold: bool = False) -> StatsOut:
        """``show_gold``: the gold-item figures, which would tell a reviewer which items were
        gold (resolve one, see the count move), are for admins only."""
        hidden = {} if show_gold else {"num_gold": None, "num_gold_correct": None}
        return cls(
            by_status=stats.by_status,
            num_overdue=stats.num_overdue,
            num_multiply_rated=stats.num_multiply_rated,
            agreement=stats.agreement,
            num_needing_ratings=stats.num_needing_ratings,
            reviewers=[
                ReviewerStatsOut(
                    **{
                        **asdict(r),
                        "gold_accuracy": r.gold_accuracy if show_gold else None,
                        **hidden,
                    }
                )
                for r in stats.reviewers
            ],
        )


KEY_NAME_PATTERN = r"^[A-Za-z0-9_-]+$"


class KeyIn(StrictRequest):
    name: str = Field(..., min_length=1, max_length=64, pattern=KEY_NAME_PATTERN)
    role: Literal["app", "reviewer", "admin"]


class KeyOut(BaseModel):
    name: str
    role: str
    created_at: float


class NewKeyOut(KeyOut):
    key: str = Field(..., description="shown once; only its hash is stored")
