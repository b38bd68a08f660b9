"""What both SDK clients send and how they read the answers: one ``_Request`` per call, and the
server's errors mapped to the project's typed exceptions. ``Client`` and ``AsyncClient``
(``rag.client``) differ only in how they wait, so they cannot drift apart."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from rag.errors import (
    AuthenticationError,
    ConflictError,
    DocumentNotFoundError,
    DocumentParseError,
    IndexMismatchError,
    IndexNotFoundError,
    InvalidInputError,
    LengthRequiredError,
    NotFoundError,
    NotReadyError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RagGuardError,
    UnsupportedFileTypeError,
)

_BY_STATUS: dict[int, type[RagGuardError]] = {
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: IndexMismatchError,
    411: LengthRequiredError,
    413: PayloadTooLargeError,
    415: UnsupportedFileTypeError,
    422: InvalidInputError,
    503: NotReadyError,
}
_BY_KIND: dict[str, type[RagGuardError]] = {
    cls.error_type: cls for cls in (IndexNotFoundError, DocumentNotFoundError, DocumentParseError)
} | {
    kind: ConflictError
    for kind in (
        "not_claimed",
        "claimed_by_another",
        "claim_expired",
        "already_resolved",
        "review_conflict",
    )
}


class ServerError(RagGuardError):
    """The server answered with an error this client has no specific type for."""


def _raise_for_status(response: httpx.Response) -> None:
    if response.is_success:
        return
    try:
        body = response.json()
        detail, kind = body.get("detail", response.text), body.get("error", "")
    except ValueError:
        detail, kind = response.text, ""
    if not isinstance(detail, str):
        detail = "; ".join(
            f"{'.'.join(map(str, d.get('loc', [])))}: {d.get('msg')}" for d in detail
        )
    error_type = _BY_KIND.get(kind) or _BY_STATUS.get(response.status_code, ServerError)
    error = error_type(f"HTTP {response.status_code}: {detail}")
    error.status_code = response.status_code
    error.error_type = kind or error.error_type
    raise error


def _headers(api_key: str | None, reviewer: str | None) -> dict[str, str]:
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    return headers | ({"x-reviewer": reviewer} if reviewer else {})


def _ask_body(question: str, options: dict[str, Any]) -> dict[str, Any]:
    return {"question": question, **{k: v for k, v in options.items() if v is not None}}


def _index_params(index: str | None) -> dict[str, str]:
    return {"index": index} if index else {}


def _file_parts(path: Path, doc_id: str | None) -> tuple[dict[str, Any], dict[str, str]]:
    files = {"file": (path.name, path.read_bytes())}
    return files, ({"doc_id": doc_id} if doc_id else {})


@dataclass(frozen=True, slots=True)
class _Request:
    """One call as both clients send it; ``is_text``: return the body as text, not JSON."""

    method: str
    path: str
    params: dict[str, Any] = field(default_factory=dict)
    json: dict[str, Any] | None = None
    is_text: bool = False


def _read(response: httpx.Response, is_text: bool = False) -> Any:
    _raise_for_status(response)
    if is_text:
        return response.text
    return response.json() if response.content else None


def _delete_document(doc_id: str, index: str | None) -> _Request:
    return _Request("DELETE", f"/v1/documents/{quote(doc_id, safe='/')}", _index_params(index))


def _review_path(review_id: str, action: str = "") -> str:
    return f"/v1/reviews/{quote(review_id)}" + (f"/{action}" if action else "")


def _list_reviews(filters: dict[str, Any]) -> _Request:
    return _Request("GET", "/v1/reviews", {k: v for k, v in filters.items() if v is not None})


def _get_review(review_id: str) -> _Request:
    return _Request("GET", _review_path(review_id))


def _release_review(review_id: str) -> _Request:
    return _Request("POST", _review_path(review_id, "release"))


def _claim_review(review_id: str | None) -> _Request:
    return _Request(
        "POST", "/v1/reviews/next" if review_id is None else _review_path(review_id, "claim")
    )


def _resolve_review(
    review_id: str,
    action: str,
    edited_answer: str | None,
    ratings: dict[str, int | None] | None,
    comment: str,
) -> _Request:
    body = {"action": action, "edited_answer": edited_answer, "ratings": ratings or {}}
    return _Request("POST", _review_path(review_id, "resolve"), json={**body, "comment": comment})


def _export_reviews(format: str, status: str | None) -> _Request:
    params = {"format": format, **({"status": status} if status else {})}
    return _Request("GET", "/v1/reviews/export", params, is_text=True)
