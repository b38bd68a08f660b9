"""End-user feedback on an answer: thumbs up or down, by the answer's id (the ``request_id`` of
``/v1/ask``, or the ``id`` of a grounded OpenAI response). Kept as a weak label, apart from the
reviewers' verdicts: it is counted and shown, never fitted."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from guards.review import ItemNotFoundError
from rag.server.auth import Principal, Role, require
from rag.server.schemas import ErrorOut
from rag.server.state import ReviewsDep, StateDep

router = APIRouter(prefix="/v1/answers", tags=["feedback"])
App = Annotated[Principal, Depends(require(Role.APP))]
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (400, 401, 403, 404, 422, 503)
}
_RESPONSE_PREFIXES = ("chatcmpl-", "cmpl-")


class FeedbackIn(BaseModel):
    rating: Literal["up", "down"] = Field(description="thumbs up (helpful) or down")
    comment: str = Field("", max_length=2000)


class FeedbackOut(BaseModel):
    id: int
    answer_id: str
    index: str
    rating: Literal["up", "down"]
    comment: str
    by: str
    created_at: float


def answer_ids(given: str) -> list[str]:
    """The ids ``given`` may name: itself, and after a grounded OpenAI response's prefix."""
    return [given] + [given.removeprefix(p) for p in _RESPONSE_PREFIXES if given.startswith(p)]


@router.post("/{answer_id}/feedback", status_code=201, responses=_ERRORS)
def give_feedback(
    answer_id: str, body: FeedbackIn, store: ReviewsDep, state: StateDep, who: App
) -> FeedbackOut:
    """Thumbs up or down (and a comment) on an answer this server gave; 404 for an id it never
    gave (abstentions are not recorded)."""
    ids = answer_ids(answer_id)
    for position, candidate in enumerate(ids, 1):
        try:
            feedback = store.labels.add_feedback(
                candidate, helpful=body.rating == "up", comment=body.comment, actor=who.name
            )
            break
        except ItemNotFoundError:
            if position == len(ids):
                raise
    state.telemetry.feedback.labels(feedback.index_name, body.rating).inc()
    return FeedbackOut(
        id=feedback.id,
        answer_id=feedback.answer_id,
        index=feedback.index_name,
        rating=body.rating,
        comment=feedback.comment,
        by=feedback.actor,
        created_at=feedback.created_at,
    )
