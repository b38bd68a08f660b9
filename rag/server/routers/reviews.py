"""The review queue: list, read, claim, release, resolve, rate; statistics and export."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import StreamingResponse

from guards.review import Resolution, ReviewItem, ReviewStore, Status, queue_stats
from rag.errors import InvalidInputError
from rag.review_desk import ReviewOut, export_rows, to_csv
from rag.server.auth import Principal, Role, require
from rag.server.review_schemas import (
    ClaimIn,
    GoldIn,
    RateIn,
    ResolveIn,
    ReviewList,
    StatsOut,
)
from rag.server.schemas import MAX_OFFSET, ErrorOut
from rag.server.state import KeysDep, PipelineDep, ReviewsDep

router = APIRouter(prefix="/v1/reviews", tags=["reviews"])
Reviewer = Annotated[Principal, Depends(require(Role.REVIEWER))]
Admin = Annotated[Principal, Depends(require(Role.ADMIN))]
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (400, 401, 403, 404, 409, 422, 503)
}


def _out(store: ReviewStore, item: ReviewItem, who: Principal, *, audit: bool = False) -> ReviewOut:
    return ReviewOut.from_item(
        item,
        store.clock(),
        show_gold=who.role is Role.ADMIN,
        audit=store.audit(item.id) if audit else None,
    )


@router.get("", response_model=ReviewList, responses=_ERRORS)
def list_reviews(
    store: ReviewsDep,
    who: Reviewer,
    status: Annotated[
        Status | None, Query(description="an expired claim counts as pending")
    ] = None,
    reason: Annotated[str | None, Query(max_length=200, description="text in the reasons")] = None,
    assignee: Annotated[
        str | None, Query(max_length=64, description="holder of a live claim")
    ] = None,
    min_age_s: Annotated[
        float | None, Query(ge=0, description="queued at least this long ago")
    ] = None,
    max_age_s: Annotated[
        float | None, Query(ge=0, description="queued at most this long ago")
    ] = None,
    overdue: Annotated[bool | None, Query(description="past the deadline and still open")] = None,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> ReviewList:
    """Items matching every filter: open ones most urgent first, resolved ones newest first."""
    items, total = store.list_items(
        status=status,
        reason=reason,
        assignee=assignee,
        min_age_s=min_age_s,
        max_age_s=max_age_s,
        is_overdue=overdue,
        offset=offset,
        limit=limit,
    )
    now = store.clock()
    show_gold = who.role is Role.ADMIN
    return ReviewList(
        total=total,
        offset=offset,
        limit=limit,
        items=[
            ReviewOut.from_item(i, now, show_gold=show_gold, with_passages=False) for i in items
        ],
    )


@router.get("/me", responses=_ERRORS)
def whoami(who: Reviewer) -> dict[str, str]:
    """The caller as the review API sees them: the key's name (or X-Reviewer) and role."""
    return {"name": who.name, "role": who.role.value}


@router.get("/stats", response_model=StatsOut, responses=_ERRORS)
def review_stats(store: ReviewsDep, who: Reviewer) -> StatsOut:
    """Counts by status, overdue items, agreement between reviewers, per-reviewer figures."""
    return StatsOut.from_stats(queue_stats(store), show_gold=who.role is Role.ADMIN)


@router.get(
    "/export",
    responses={**_ERRORS, 200: {"content": {"application/x-ndjson": {}, "text/csv": {}}}},
)
def export_reviews(
    store: ReviewsDep,
    who: Reviewer,
    format: Annotated[Literal["jsonl", "csv"], Query()] = "jsonl",
    status: Status | None = None,
) -> StreamingResponse:
    """Every item (or those of one status) with ratings, as JSON lines or CSV."""
    rows = export_rows(store, status, show_gold=who.role is Role.ADMIN)
    if format == "jsonl":
        body: Iterator[str] = (json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        media = "application/x-ndjson"
    else:
        body, media = to_csv(rows), "text/csv"
    disposition = f'attachment; filename="reviews.{format}"'
    return StreamingResponse(body, media_type=media, headers={"content-disposition": disposition})


@router.post("/next", response_model=ReviewOut | None, responses=_ERRORS)
def claim_next(store: ReviewsDep, who: Reviewer, body: ClaimIn | None = None) -> ReviewOut | None:
    """Claim the most urgent claimable item; null when the queue is empty."""
    ttl = body.ttl_s if body else None
    item = store.claim_next(who.name, ttl_s=ttl, is_admin=who.role is Role.ADMIN)
    return None if item is None else _out(store, item, who, audit=True)


@router.post("/next-to-rate", response_model=ReviewOut | None, responses=_ERRORS)
def next_to_rate(store: ReviewsDep, who: Reviewer) -> ReviewOut | None:
    """The resolved item to rate next (for agreement between reviewers): one with fewer than
    ``RAGGUARD_REVIEW_MIN_RATINGS`` ratings that you neither resolved nor rated; null when there
    is none. Rate it with ``POST /v1/reviews/{id}/rate``."""
    item = store.next_to_rate(who.name)
    return None if item is None else _out(store, item, who, audit=True)


@router.post("/gold", status_code=201, responses=_ERRORS)
def add_gold(body: GoldIn, store: ReviewsDep, who: Admin) -> dict[str, str]:
    """Add a gold item (a question with a known answer) to score reviewers with."""
    gold_id = store.add_gold(body.question, body.answer, is_correct=body.correct)
    return {"id": gold_id}


@router.post("/{item_id}/gold", status_code=201, responses=_ERRORS)
def gold_from_item(item_id: str, store: ReviewsDep, who: Admin) -> dict[str, str]:
    """Make a resolved item a gold item: its answer counts as right if it was approved, wrong
    if it was rejected or edited. Unlike a gold item added by hand it keeps the passages, sampled
    answers and guard verdicts, so in the queue it looks like any other item. 409 when the item
    is not resolved (or is a gold item)."""
    return {"id": store.gold_from_item(item_id, who.name)}


@router.get("/{item_id}", response_model=ReviewOut, responses=_ERRORS)
def get_review(item_id: str, store: ReviewsDep, who: Reviewer) -> ReviewOut:
    """One item with its passages (cited sentences marked), guard verdicts and audit trail."""
    item = store.get(item_id)
    return _out(store, item, who, audit=True)


@router.post("/{item_id}/claim", response_model=ReviewOut, responses=_ERRORS)
def claim(item_id: str, store: ReviewsDep, who: Reviewer, body: ClaimIn | None = None) -> ReviewOut:
    """Reserve the item until the claim expires; claiming again renews it. 409 when another
    reviewer holds it or it is resolved; 403 when it was escalated away from you (an escalated
    item goes to the reviewer it names or to an admin, never back to who escalated it)."""
    ttl = body.ttl_s if body else None
    item = store.claim(item_id, who.name, ttl_s=ttl, is_admin=who.role is Role.ADMIN)
    return _out(store, item, who, audit=True)


@router.post("/{item_id}/release", response_model=ReviewOut, responses=_ERRORS)
def release(item_id: str, store: ReviewsDep, who: Reviewer) -> ReviewOut:
    """Give the item back to the queue."""
    item = store.release(item_id, who.name)
    return _out(store, item, who, audit=True)


@router.post("/{item_id}/resolve", response_model=ReviewOut, responses=_ERRORS)
def resolve(
    item_id: str, body: ResolveIn, store: ReviewsDep, keys: KeysDep, who: Reviewer
) -> ReviewOut:
    """Approve, edit, reject or escalate an item you hold a live claim on. An approved or edited
    answer is what the same question gets from then on (until the index changes). An escalation
    goes to ``escalate_to`` (with API keys: the name of a reviewer's or admin's key), else to
    the admins."""
    if body.escalate_to and keys.is_enabled:
        reviewers = {k.name for k in keys.list_keys() if k.role in (Role.REVIEWER, Role.ADMIN)}
        if body.escalate_to.strip() not in reviewers:
            raise InvalidInputError(f"no reviewer's key is named {body.escalate_to!r}")
    item = store.resolve(
        item_id,
        who.name,
        Resolution(body.action),
        edited_answer=body.edited_answer,
        ratings=body.ratings.to_ratings(body.comment),
        escalate_to=body.escalate_to,
    )
    return _out(store, item, who, audit=True)


@router.post("/{item_id}/rate", response_model=ReviewOut, responses=_ERRORS)
def rate(item_id: str, body: RateIn, store: ReviewsDep, who: Reviewer) -> ReviewOut:
    """A second opinion on a resolved item: ratings for inter-reviewer agreement."""
    item = store.rate(item_id, who.name, body.ratings.to_ratings(body.comment))
    return _out(store, item, who, audit=True)


@router.get("/risk/collections", responses=_ERRORS)
def risk_status(pipeline: PipelineDep, who: Reviewer) -> list[dict[str, Any]]:
    """Per collection: labels so far, the calibration in force, and (with a target risk) the
    certified threshold, the risk it is estimated at with its upper bound, and the coverage."""
    return [r.as_dict() for r in pipeline.risk.status(fresh=True)]


@router.post("/risk/collections/{index}/refit", responses=_ERRORS)
def refit(index: str, pipeline: PipelineDep, who: Admin) -> dict[str, Any]:
    """Refit one collection's calibration from its labels now (as the background refit does);
    the new version is swapped in only when it is no worse on the held-back labels."""
    report = pipeline.risk.refit(index)
    return {**asdict(report), "status": pipeline.risk.state(index, fresh=True).as_dict()}
