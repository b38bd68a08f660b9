"""Why a conditional update of a review item matched no row: the typed error to raise.

Every workflow change is one ``UPDATE ... WHERE <the item is in a state that allows it>``; when it
matches nothing, the item's state read back afterwards says which rule was broken.
"""

from __future__ import annotations

from typing import Any

from guards.review import escalation
from guards.review.errors import (
    AlreadyResolvedError,
    ClaimConflictError,
    ClaimExpiredError,
    ItemNotFoundError,
    NotClaimedError,
    ReviewConflictError,
)
from guards.review.models import Status


def why_no_row_matched(
    row: dict[str, Any] | None,
    item_id: str,
    actor: str,
    now: float,
    *,
    claiming: bool = False,
    releasing: bool = False,
) -> Exception:
    """The error that explains why a conditional update matched no row. ``row`` is read
    after the update: on PostgreSQL another transaction may have committed in between."""
    if row is None:
        return ItemNotFoundError(f"no review item has id {item_id!r}")
    status, assignee, expires = Status(row["status"]), row["assignee"], row["claim_expires_at"]
    if not status.is_open:
        return AlreadyResolvedError(
            f"item {item_id} was already {status.value} by {row['resolved_by']}"
        )
    live = status is Status.CLAIMED and expires is not None and now < expires
    if live and assignee != actor:
        return ClaimConflictError(
            f"item {item_id} is claimed by {assignee} for another {expires - now:.0f} s"
        )
    if claiming:  # an escalation that is not the actor's; else unreachable
        return escalation.refusal(row, item_id, actor) or ReviewConflictError(
            f"item {item_id} cannot be claimed"
        )
    if status is Status.CLAIMED and assignee == actor and not releasing:
        return ClaimExpiredError(
            f"your claim on item {item_id} expired {now - expires:.0f} s ago; claim it again"
        )
    return NotClaimedError(f"you ({actor}) do not hold a claim on item {item_id}; claim it first")
