"""What both SDK clients send and how they read the answers: one ``_Request`` per call, and the
server's errors mapped to the project's typed exceptions. ``Client`` and ``AsyncClient``
(``rag.client``) differ only in how they wait, so they cannot drift apart."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from rag.errors import OverloadedError, RagGuardError
from rag.http_errors import error_class_for
from rag.types import AskEvent, Passage, PassagesEvent, Result, ResultEvent, TokenEvent


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
    retry_after = response.headers.get("retry-after", "")
    raise _error(
        response.status_code,
        kind,
        detail,
        retry_after_s=int(retry_after) if retry_after.isdigit() else None,
    )


def _error(
    status: int, kind: str, detail: str, *, retry_after_s: int | None = None
) -> RagGuardError:
    error_type = error_class_for(status, kind) or ServerError
    error = error_type(f"HTTP {status}: {detail}")
    error.status_code = status
    error.error_type = kind or error.error_type
    if isinstance(error, OverloadedError) and retry_after_s is not None:
        error.retry_after_s = retry_after_s
    return error


class _SSEParser:
    """Lines of a ``text/event-stream`` in; (event, data) out, once per complete event."""

    def __init__(self) -> None:
        self.event = "message"
        self.data: list[str] = []

    def feed(self, line: str) -> tuple[str, str] | None:
        if not line:  # a blank line ends the event
            done = (self.event, "\n".join(self.data)) if self.data else None
            self.event, self.data = "message", []
            return done
        if line.startswith(":"):
            return None  # a comment (keep-alive ping)
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self.event = value
        elif name == "data":
            self.data.append(value)
        return None


def _ask_event(event: str, data: str) -> AskEvent | None:
    """One event of a streamed answer; an ``error`` event raises its typed error."""
    body = json.loads(data)
    if event == "passages":
        return PassagesEvent([Passage(**p) for p in body["passages"]], body["index"])
    if event == "token":
        return TokenEvent(body["text"])
    if event == "result":
        return ResultEvent(Result.from_dict(body))
    if event == "error":
        status = {"deadline_exceeded": 504, "overloaded": 429}.get(body.get("error", ""), 500)
        raise _error(status, body.get("error", ""), body.get("detail", ""))
    return None  # an event kind this client does not know: skipped


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
    escalate_to: str | None = None,
) -> _Request:
    body = {"action": action, "edited_answer": edited_answer, "ratings": ratings or {}}
    if escalate_to is not None:
        body["escalate_to"] = escalate_to
    return _Request("POST", _review_path(review_id, "resolve"), json={**body, "comment": comment})


def _export_reviews(format: str, status: str | None) -> _Request:
    params = {"format": format, **({"status": status} if status else {})}
    return _Request("GET", "/v1/reviews/export", params, is_text=True)


def _feedback(answer_id: str, rating: str, comment: str) -> _Request:
    body = {"rating": rating, "comment": comment}
    return _Request("POST", f"/v1/answers/{quote(answer_id)}/feedback", json=body)


def _risk_status() -> _Request:
    return _Request("GET", "/v1/reviews/risk/collections")


def _refit(index: str) -> _Request:
    return _Request("POST", f"/v1/reviews/risk/collections/{quote(index)}/refit")
