"""A review item as people see it: through the review API, the reviewer page, the review CLI and
the export (one shape for all of them)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from pydantic import BaseModel, Field

from guards.review import AuditEntry, Ratings, ReviewItem, gold
from guards.review.highlight import cited_sentences


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
    kind: str | None = Field(
        None,
        description="admins only: flagged (the policy asked for a person) or audit (an answer "
        "that went out, sampled for an unbiased label); reviewers judge both alike",
    )
    propensity: float | None = Field(
        None, description="admins only: the probability with which the item was sampled"
    )
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
            kind=item.kind if show_gold else None,
            propensity=item.propensity if show_gold else None,
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
