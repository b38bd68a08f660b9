"""ragguard's error types. Each names what went wrong (its class and ``error_type``); the HTTP
status that answers it is in one table, ``rag.http_errors``."""

from __future__ import annotations


class RagGuardError(Exception):
    """Base class: a failure with a message that says what was wrong and what is allowed."""

    error_type = "internal_error"
    status_code: int | None = None
    """On an error the SDK raises from a server's response: the status it answered with."""


class InvalidInputError(RagGuardError, ValueError):
    """The request is well-formed but its values are not acceptable."""

    error_type = "invalid_input"


class NotFoundError(RagGuardError, LookupError):
    """A named thing (index, document) does not exist."""

    error_type = "not_found"


class IndexNotFoundError(NotFoundError):
    """No index with that name has been built."""

    error_type = "index_not_found"


class DocumentNotFoundError(NotFoundError):
    """No document with that id is in the index."""

    error_type = "document_not_found"


class ReadOnlyIndexError(RagGuardError):
    """A write (ingestion, deletion, a new index) to indexes served read-only."""

    error_type = "read_only_index"


class UnsupportedFileTypeError(RagGuardError):
    """A file's type cannot be ingested."""

    error_type = "unsupported_file_type"


class PayloadTooLargeError(RagGuardError):
    """An upload or a question is larger than the configured limit."""

    error_type = "payload_too_large"


class LengthRequiredError(RagGuardError):
    """An upload came without a Content-Length header, so its size cannot be checked first."""

    error_type = "length_required"


class BodyEncodingError(RagGuardError):
    """A JSON request body that is not UTF-8."""

    error_type = "invalid_encoding"


class DocumentParseError(RagGuardError):
    """A file has a supported type but its content cannot be read."""

    error_type = "unreadable_document"


class IndexMismatchError(RagGuardError):
    """An index was built with another embedding model (or is of an unknown format version)."""

    error_type = "index_mismatch"


class MissingDependencyError(RagGuardError, ImportError):
    """An optional package that this feature needs is not installed."""

    error_type = "missing_dependency"


class NotReadyError(RagGuardError):
    """The service is still loading its model or index."""

    error_type = "not_ready"


class AuthenticationError(RagGuardError):
    """No API key, or one the server does not know."""

    error_type = "unauthenticated"


class PermissionDeniedError(RagGuardError):
    """The API key is valid but its role does not allow this route."""

    error_type = "forbidden"


class ConfigurationError(RagGuardError):
    """The settings ask for something unsafe or impossible (e.g. serving beyond loopback with no
    API keys)."""

    error_type = "configuration_error"


class ConflictError(RagGuardError):
    """The thing is not in a state that allows the request (a review claimed by someone else,
    already resolved, or whose claim expired)."""

    error_type = "conflict"


class DeadlineExceededError(RagGuardError, TimeoutError):
    """The question was not answered within its deadline; its generation was stopped."""

    error_type = "deadline_exceeded"


class OverloadedError(RagGuardError):
    """Too many questions are waiting already; retry after ``retry_after_s`` seconds."""

    error_type = "overloaded"

    def __init__(self, message: str, retry_after_s: int = 1):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class EngineUnavailableError(RagGuardError):
    """The generator can no longer serve requests (its loop failed or it is shutting down)."""

    error_type = "engine_unavailable"


class EngineStartingError(EngineUnavailableError):
    """The generator does not serve yet but is expected to (a remote generator still starting or
    reconnecting); retry after ``retry_after_s`` seconds."""

    error_type = "engine_starting"

    def __init__(self, message: str, retry_after_s: int = 1):
        super().__init__(message)
        self.retry_after_s = retry_after_s
