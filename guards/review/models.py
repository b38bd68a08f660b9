"""What the review queue holds: items, their status, reviewers' ratings and the audit trail."""

from __future__ import annotations

import enum
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from guards.review.errors import InvalidReviewError


class Status(enum.StrEnum):
    """pending → claimed → approved | edited | rejected | escalated (escalated is claimable, by
    someone other than the reviewer who escalated it)."""

    PENDING = "pending"
    CLAIMED = "claimed"
    APPROVED = "approved"
    EDITED = "edited"
    REJECTED = "rejected"
    ESCALATED = "escalated"

    @property
    def is_open(self) -> bool:
        """Still waiting for a reviewer (claimable, or claimed and maybe expired)."""
        return self in (Status.PENDING, Status.CLAIMED, Status.ESCALATED)


class Resolution(enum.StrEnum):
    """What a reviewer does with a claimed item, and the status it leads to."""

    APPROVE = "approve"
    EDIT = "edit"
    REJECT = "reject"
    ESCALATE = "escalate"

    @property
    def status(self) -> Status:
        return {
            Resolution.APPROVE: Status.APPROVED,
            Resolution.EDIT: Status.EDITED,
            Resolution.REJECT: Status.REJECTED,
            Resolution.ESCALATE: Status.ESCALATED,
        }[self]


# The human-evaluation scales: name -> highest value (every scale starts at 0).
RATING_SCALES: dict[str, int] = {"relevance": 3, "fluency": 2, "usefulness": 4}


@dataclass(frozen=True, slots=True)
class Ratings:
    """One reviewer's judgement of an answer: relevance 0–3, fluency 0–2, usefulness 0–4."""

    relevance: int | None = None
    fluency: int | None = None
    usefulness: int | None = None
    comment: str = ""

    def __post_init__(self) -> None:
        for name, top in RATING_SCALES.items():
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
                raise InvalidReviewError(
                    f"{name} must be an integer from 0 to {top}, got {value!r}"
                )

    @property
    def is_empty(self) -> bool:
        return all(getattr(self, n) is None for n in RATING_SCALES) and not self.comment


@dataclass(frozen=True, slots=True)
class Rating:
    """Ratings as stored: who gave them on which item, and when."""

    item_id: str
    reviewer: str
    ratings: Ratings
    created_at: float


@dataclass(frozen=True, slots=True)
class NewItem:
    """What the pipeline hands to the queue when the policy asks for a person."""

    question: str
    answer: str
    candidates: list[str] = field(default_factory=list)
    passages: list[dict[str, Any]] = field(default_factory=list)
    guard_results: list[dict[str, Any]] = field(default_factory=list)
    confidence: float | None = None
    reasons: list[str] = field(default_factory=list)
    index_name: str = ""
    index_version: str = ""
    request_id: str = ""
    kind: str = "flagged"
    """``flagged`` (the policy asked for a person) or ``audit`` (drawn at the audit rate,
    whatever the policy decided, to give unbiased labels)."""
    propensity: float = 1.0
    """The probability with which this answer was sent to a person."""
    uniform: bool = False
    """Drawn independently of its confidence (an audit draw, or any answer while nothing is
    answered automatically): only such labels certify a risk threshold."""
    signals: dict[str, float] = field(default_factory=dict)
    """The confidence model's inputs, kept so the verdict can recalibrate it."""
    shipped_confidence: float | None = None
    """The confidence before any per-collection calibration (None: ``confidence`` is it)."""
    profile: str = ""
    """The generator profile that wrote the answer."""

    def __post_init__(self) -> None:
        if self.kind not in ITEM_KINDS:
            raise InvalidReviewError(f"an item's kind is one of {ITEM_KINDS}, not {self.kind!r}")
        if not 0.0 < self.propensity <= 1.0:
            raise InvalidReviewError(f"propensity must be in (0, 1], got {self.propensity}")


ITEM_KINDS = ("flagged", "audit")


@dataclass(frozen=True, slots=True)
class ReviewItem:
    """An answer awaiting or having had human review."""

    id: str
    question: str
    answer: str
    candidates: list[str]
    passages: list[dict[str, Any]]
    guard_results: list[dict[str, Any]]
    confidence: float | None
    reasons: list[str]
    priority: float
    """Lower is served first: knowledge-graph contradictions, then lower confidence."""
    created_at: float
    deadline: float
    status: Status
    assignee: str | None
    claim_expires_at: float | None
    resolution: Resolution | None
    edited_answer: str | None
    resolved_by: str | None
    resolved_at: float | None
    index_name: str
    index_version: str
    request_id: str
    gold_id: str | None
    """Set on gold items (known answers mixed in to score reviewers); never shown to reviewers."""
    ratings: list[Rating] = field(default_factory=list)
    escalated_by: str | None = None
    """Who escalated the item last (kept once it is resolved); they may not claim it back."""
    escalated_to: str | None = None
    """The reviewer it was escalated to; None with ``escalated_by`` set: to the admins."""
    kind: str = "flagged"
    propensity: float = 1.0
    uniform: bool = False
    signals: dict[str, float] = field(default_factory=dict)
    shipped_confidence: float | None = None
    profile: str = ""

    @property
    def final_answer(self) -> str:
        """What users get once approved or edited."""
        return self.edited_answer if self.edited_answer is not None else self.answer

    def is_overdue(self, now: float) -> bool:
        return self.status.is_open and now > self.deadline

    def claim_is_live(self, now: float) -> bool:
        return (
            self.status is Status.CLAIMED
            and self.claim_expires_at is not None
            and now < self.claim_expires_at
        )


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One line of the append-only audit log: who did what to which item, before and after."""

    id: int
    item_id: str
    actor: str
    action: str
    at: float
    before: dict[str, Any] | None
    after: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class CachedAnswer:
    """A reviewer's approved (or edited) answer for a question on one version of an index."""

    answer: str
    review_id: str
    reviewer: str
    passages: list[dict[str, Any]]
    created_at: float


def normalize_question(question: str) -> str:
    """The answer-cache key: Unicode-normalised, case-folded, single-spaced, no end punctuation."""
    text = unicodedata.normalize("NFKC", question).casefold()
    text = re.sub(r"\s+", " ", text).strip()
    return text.rstrip(" ?!.。？！")


def priority_of(confidence: float | None, guard_results: list[dict[str, Any]]) -> float:
    """Knowledge-graph contradictions first (0.x), then everything else (1.x) by confidence."""
    contradicted = any(
        g.get("name") == "knowledge_graph" and g.get("outcome") == "fail" for g in guard_results
    )
    return (0.0 if contradicted else 1.0) + (0.0 if confidence is None else min(confidence, 0.999))
