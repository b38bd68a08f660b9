"""Which HTTP status answers which error: the one table that every route (ragguard's error shape
and OpenAI's) and the SDK (reading errors back into types) share.

Errors themselves name what went wrong (their class and ``error_type``) and carry no status; a
status is found here by walking the error's classes, most derived first, so a subclass inherits
its base's status unless it has a row of its own. Anything without a row is a 500.
"""

from __future__ import annotations

from engine import EngineError, PromptTooLongError, RemoteRequestError
from guards.review.errors import (
    EscalatedElsewhereError,
    InvalidReviewError,
    ItemNotFoundError,
    ReviewConflictError,
    ReviewError,
)
from rag.errors import (
    AuthenticationError,
    BodyEncodingError,
    ConflictError,
    DeadlineExceededError,
    DocumentParseError,
    EngineUnavailableError,
    IndexMismatchError,
    InvalidInputError,
    LengthRequiredError,
    NotFoundError,
    NotReadyError,
    OverloadedError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RagGuardError,
    ReadOnlyIndexError,
    UnsupportedFileTypeError,
)

STATUS: dict[type[BaseException], int] = {
    # ragguard's own
    RagGuardError: 500,
    BodyEncodingError: 400,
    InvalidInputError: 422,
    DocumentParseError: 422,
    AuthenticationError: 401,
    PermissionDeniedError: 403,
    ReadOnlyIndexError: 403,
    NotFoundError: 404,
    ConflictError: 409,
    IndexMismatchError: 409,
    LengthRequiredError: 411,
    PayloadTooLargeError: 413,
    UnsupportedFileTypeError: 415,
    OverloadedError: 429,
    NotReadyError: 503,
    EngineUnavailableError: 503,
    DeadlineExceededError: 504,
    # the review queue's
    ReviewError: 500,
    InvalidReviewError: 422,
    EscalatedElsewhereError: 403,
    ItemNotFoundError: 404,
    ReviewConflictError: 409,
    # the engine's: a request it refuses (a prompt too long, a remote 4xx) is the caller's
    EngineError: 500,
    PromptTooLongError: 422,
    RemoteRequestError: 422,
}


def status_of(exc: BaseException) -> int:
    """The HTTP status for ``exc``: its most derived class with a row, else 500."""
    return next((STATUS[cls] for cls in type(exc).__mro__ if cls in STATUS), 500)


def error_type_of(exc: BaseException) -> str:
    """The ``error`` field of the response body."""
    declared = getattr(exc, "error_type", None)
    if isinstance(declared, str):
        return declared
    if isinstance(exc, EngineError):
        return "invalid_input" if status_of(exc) == 422 else "engine_error"
    return "internal_error"


def _subclasses(cls: type[RagGuardError]) -> list[type[RagGuardError]]:
    return [cls, *(sub for direct in cls.__subclasses__() for sub in _subclasses(direct))]


def error_class_for(status: int, error_type: str) -> type[RagGuardError] | None:
    """Which of ragguard's errors to raise for an error response (the SDK's reading of this
    table): the error whose ``error_type`` it names; for another layer's error (the review
    queue's) or an unknown type, the first of ragguard's own errors with the response's status;
    None when no row has it."""
    by_type = {
        cls.error_type: cls for cls in _subclasses(RagGuardError) if "error_type" in vars(cls)
    }
    if error_type in by_type and error_type != RagGuardError.error_type:
        return by_type[error_type]
    return next(
        (
            cls
            for cls, code in STATUS.items()
            if code == status
            and cls not in _NOT_GENERAL
            and cls is not RagGuardError
            and issubclass(cls, RagGuardError)
        ),
        None,
    )


_NOT_GENERAL = (BodyEncodingError,)
"""Errors of one specific fault, never what an unknown error of their status is read as."""
