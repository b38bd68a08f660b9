"""HTTP bodies of the review API (``/v1/reviews``) and the key API (``/v1/keys``)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Literal

from pydantic import BaseModel, Field

from guards.review import AuditEntry, QueueStats, Ratings, ReviewItem, gold
from guards.review.highlight import cited_sentences
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


class RatingOut(BaseModel):
    reviewer: str
    relevance: int | None
    fluency: int | None
    usefulness: int | None
    comment: str
    created_at: float


class PassageView(BaseModel):
    doc_id: str = ""
    chunk_id: str = ""
    text: str = ""
    score: float = 0.0
    cited_sentences: list[str] = Field(
        default_factory=list, description="sentences the answer rests on"
    )


class AuditOut(BaseModel):
    id: int
    item_id: str
    actor: str
    action: str
    at: float
    before: dict[str, Any] | None
    after: dict[str, Any] | None

    @classmethod
    def from_entry(cls, entry: AuditEntry) -> AuditOut:
        return cls.model_validate(asdict(entry))


class ReviewOut(BaseModel):
    """A review item. ``is_gold`` is shown to admins only, so reviewers cannot tell."""

    id: str
    question: str
    answer: str
    candidates: list[str]
    passages: list[PassageView]
    guard_results: list[dict[str, Any]]
    confidence: float | None
    reasons: list[str]
    priority: float
    created_at: float
    deadline: float
    is_overdue: bool
    age_s: float
    status: str
    assignee: str | None
    claim_expires_at: float | None
    resolution: str | None
    edited_answer: str | None
    resolved_by: str | None
    resolved_at: float | None
    index: str
    request_id: str
    ratings: list[RatingOut]
    is_gold: bool | None = None
    audit: list[AuditOut] | None = None
    escalated_by: str | None = Field(
        None, description="who escalated the item (they may not claim it back)"
    )
    escalated_to: str | None = Field(
        None, description="the reviewer it was escalated to; null with escalated_by: the admins"
    )

    @classmethod
    def from_item(
        cls,
        item: ReviewItem,
        now: float,
        *,
        show_gold: bool = False,
        audit: list[AuditEntry] | None = None,
        with_passages: bool = True,
    ) -> ReviewOut:
        passages = item.passages if with_passages else []
        marked = cited_sentences(item.final_answer, [str(p.get("text", "")) for p in passages])
        return cls(
            id=item.id,
            question=item.question,
            answer=item.answer,
            candidates=item.candidates,
            passages=[
                PassageView(
                    doc_id=str(p.get("doc_id", "")),
                    chunk_id=str(p.get("chunk_id", "")),
                    text=str(p.get("text", "")),
                    score=float(p.get("score", 0.0)),
                    cited_sentences=cited,
                )
                for p, cited in zip(passages, marked, strict=True)
            ],
            guard_results=item.guard_results,
            confidence=item.confidence,
            reasons=item.reasons,
            priority=item.priority,
            created_at=item.created_at,
            deadline=item.deadline,
            is_overdue=item.is_overdue(now),
            age_s=max(0.0, now - item.created_at),
            status=item.status.value,
            assignee=item.assignee,
            claim_expires_at=item.claim_expires_at,
            resolution=item.resolution.value if item.resolution else None,
            edited_answer=item.edited_answer,
            resolved_by=item.resolved_by,
            resolved_at=item.resolved_at,
            index=item.index_name,
            request_id=item.request_id,
            ratings=[
                RatingOut(reviewer=r.reviewer, created_at=r.created_at, **_scales(r.ratings))
                for r in item.ratings
            ],
            is_gold=(item.gold_id is not None) if show_gold else None,
            escalated_by=item.escalated_by,
            escalated_to=item.escalated_to,
            audit=None
            if audit is None
            else [AuditOut.from_entry(e) for e in audit if show_gold or e.action != gold.MADE_GOLD],
        )


def _scales(r: Ratings) -> dict[str, Any]:
    return {
        "relevance": r.relevance,
        "fluency": r.fluency,
        "usefulness": r.usefulness,
        "comment": r.comment,
    }


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
