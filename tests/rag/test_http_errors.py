"""The one table from error types to HTTP statuses (``rag.http_errors``): every error ragguard
and its review queue raise has its status there, subclasses inherit their base's, and the SDK
reads each status and kind back into the type the server raised."""

from __future__ import annotations

import inspect

import httpx
import pytest

import guards.review.errors as review_errors
import rag.errors as rag_errors
from engine.errors import ModelNotFoundError, PromptTooLongError, RemoteRequestError
from rag.client.http import _raise_for_status
from rag.http_errors import STATUS, error_class_for, error_type_of, status_of

SERVER_FAULTS = {
    rag_errors.RagGuardError,
    rag_errors.ConfigurationError,
    rag_errors.MissingDependencyError,
    review_errors.ReviewError,
    review_errors.SchemaTooNewError,
}
"""The errors that are the server's own fault: a 500."""


def error_classes() -> list[type[Exception]]:
    return [
        cls
        for module in (rag_errors, review_errors)
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, Exception) and cls.__module__ == module.__name__
    ]


@pytest.mark.parametrize("cls", error_classes(), ids=lambda cls: cls.__name__)
def test_every_error_has_a_status_and_names_itself(cls: type[Exception]) -> None:
    error = cls("something") if cls is not rag_errors.OverloadedError else cls("busy", 2)
    assert (status_of(error) == 500) == (cls in SERVER_FAULTS)
    assert not hasattr(cls, "status_code") or cls.status_code is None  # no HTTP in the errors
    # Each derives from one of the two bases that declare error_type.
    assert issubclass(cls, (rag_errors.RagGuardError, review_errors.ReviewError))
    assert error_type_of(error) == cls.error_type


def test_subclasses_inherit_their_bases_status_and_the_engine_maps_by_meaning() -> None:
    assert status_of(rag_errors.IndexNotFoundError("x")) == 404  # from NotFoundError
    assert status_of(review_errors.ClaimExpiredError("x")) == 409  # from ReviewConflictError
    assert status_of(PromptTooLongError("x")) == 422
    assert status_of(RemoteRequestError("x", 400)) == 422
    assert status_of(ModelNotFoundError("x")) == 500
    assert error_type_of(PromptTooLongError("x")) == "invalid_input"
    assert error_type_of(ModelNotFoundError("x")) == "engine_error"
    assert status_of(KeyError("x")) == 500 and error_type_of(KeyError("x")) == "internal_error"
    assert all(isinstance(status, int) and 400 <= status < 600 for status in STATUS.values())


@pytest.mark.parametrize(
    ("status", "kind", "expected"),
    [
        (409, "claim_expired", rag_errors.ConflictError),
        (409, "claimed_by_another", rag_errors.ConflictError),
        (404, "index_not_found", rag_errors.IndexNotFoundError),
        (429, "overloaded", rag_errors.OverloadedError),
        (422, "invalid_review", rag_errors.InvalidInputError),
        (418, "teapot", None),
    ],
)
def test_the_sdk_reads_a_status_and_kind_back_into_a_type(
    status: int, kind: str, expected: type[Exception] | None
) -> None:
    response = httpx.Response(status, json={"detail": "why", "error": kind})
    with pytest.raises(rag_errors.RagGuardError) as raised:
        _raise_for_status(response)
    if expected is not None:
        assert isinstance(raised.value, expected)
    assert raised.value.status_code == status and raised.value.error_type == kind


@pytest.mark.parametrize(
    "cls",
    [c for c in error_classes() if issubclass(c, rag_errors.RagGuardError) and c in STATUS],
    ids=lambda c: c.__name__,
)
def test_each_of_ragguards_errors_comes_back_as_itself(cls: type[rag_errors.RagGuardError]) -> None:
    """The SDK reads the table the server answers by: no second list to drift from it."""
    expected = None if cls is rag_errors.RagGuardError else cls
    assert error_class_for(status_of(cls("x")), cls.error_type) is expected


def test_an_unknown_error_of_a_specific_status_stays_a_server_error() -> None:
    """A 400 the framework answers (a malformed upload) is no body-encoding error."""
    assert error_class_for(400, "http_error") is None
    assert error_class_for(400, "invalid_encoding") is rag_errors.BodyEncodingError
