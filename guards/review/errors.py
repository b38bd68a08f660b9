"""Review errors: each names what went wrong (its class and ``error_type``). They carry no HTTP
status: ``guards`` knows nothing of HTTP, and the server maps them in its one table
(``rag.http_errors``)."""

from __future__ import annotations


class ReviewError(Exception):
    """Base class: a review action that cannot be done, with a message that says why."""

    error_type = "review_error"


class ItemNotFoundError(ReviewError, LookupError):
    """No review item has that id."""

    error_type = "review_not_found"


class InvalidReviewError(ReviewError, ValueError):
    """A value of the review is out of range or missing (a rating, an edit without text)."""

    error_type = "invalid_review"


class ReviewConflictError(ReviewError):
    """The item is not in a state that allows the action."""

    error_type = "review_conflict"


class ClaimConflictError(ReviewConflictError):
    """Another reviewer holds a live claim on the item."""

    error_type = "claimed_by_another"


class NotClaimedError(ReviewConflictError):
    """The actor does not hold a claim on the item."""

    error_type = "not_claimed"


class ClaimExpiredError(ReviewConflictError):
    """The actor's claim has expired; claim the item again."""

    error_type = "claim_expired"


class AlreadyResolvedError(ReviewConflictError):
    """The item has been resolved already."""

    error_type = "already_resolved"


class EscalatedElsewhereError(ReviewError):
    """The item was escalated away from the actor: the reviewer who escalated it may not claim
    it back, and only the named reviewer (or an admin) may claim it."""

    error_type = "escalated_elsewhere"


class SchemaTooNewError(ReviewError):
    """The database was migrated by a newer ragguard than this one: refuse to write to it."""

    error_type = "review_schema_too_new"
