"""SDK client for a ragguard server: the same ``Result`` type as the in-process ``Pipeline``.

``Client`` is synchronous, ``AsyncClient`` awaits; both send the requests and read the responses
that ``rag.client.http`` builds, so they cannot drift apart.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx

from rag.client.http import (
    ServerError,
    _ask_body,
    _ask_event,
    _claim_review,
    _delete_document,
    _export_reviews,
    _feedback,
    _file_parts,
    _get_review,
    _headers,
    _index_params,
    _list_reviews,
    _read,
    _refit,
    _release_review,
    _Request,
    _resolve_review,
    _risk_status,
    _SSEParser,
)
from rag.types import AskEvent, Result

DEFAULT_TIMEOUT_S = 120.0
__all__ = ["DEFAULT_TIMEOUT_S", "AsyncClient", "Client", "ServerError"]


class Client:
    """Synchronous client: ``Client("http://127.0.0.1:8000").ask("...") -> Result``."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        api_key: str | None = None,
        reviewer: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ):
        """``reviewer`` names you to a server running without API keys (loopback only)."""
        headers = _headers(api_key, reviewer)
        self._http = httpx.Client(
            base_url=base_url, timeout=timeout_s, headers=headers, transport=transport
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, url: str, **kwargs: Any) -> Any:
        return _read(self._http.request(method, url, **kwargs))

    def _send(self, r: _Request) -> Any:
        response = self._http.request(r.method, r.path, params=r.params, json=r.json)
        return _read(response, r.is_text)

    def ask(self, question: str, **options: Any) -> Result:
        """Ask a question; options: index, top_k, min_score, retrieval, max_tokens,
        temperature, seed, abstain_below, review_below, timeout_s."""
        return Result.from_dict(self._call("POST", "/v1/ask", json=_ask_body(question, options)))

    def ask_stream(self, question: str, **options: Any) -> Iterator[AskEvent]:
        """Ask and iterate over the answer as it is generated: a ``PassagesEvent``, then
        ``TokenEvent``s, then the checked ``ResultEvent``. Leaving the loop early closes the
        connection, which stops the generation on the server."""
        body = {**_ask_body(question, options), "stream": True}
        with self._http.stream("POST", "/v1/ask", json=body) as response:
            if not response.is_success:
                response.read()
                _read(response)
            parser = _SSEParser()
            for line in response.iter_lines():
                if (message := parser.feed(line)) and (decoded := _ask_event(*message)):
                    yield decoded

    def add_text(
        self,
        doc_id: str,
        text: str,
        *,
        metadata: dict[str, Any] | None = None,
        index: str | None = None,
    ) -> dict[str, Any]:
        """Add or replace a document given as text."""
        body = {"doc_id": doc_id, "text": text, "metadata": metadata or {}}
        result: dict[str, Any] = self._call(
            "POST", "/v1/documents", json=body, params=_index_params(index)
        )
        return result

    def add_file(
        self, path: str | Path, *, doc_id: str | None = None, index: str | None = None
    ) -> dict[str, Any]:
        """Upload a .txt, .md, .html, .pdf or .jsonl file."""
        files, data = _file_parts(Path(path), doc_id)
        result: dict[str, Any] = self._call(
            "POST", "/v1/documents", files=files, data=data, params=_index_params(index)
        )
        return result

    def list_documents(
        self, *, index: str | None = None, offset: int = 0, limit: int = 100
    ) -> dict[str, Any]:
        params = {**_index_params(index), "offset": offset, "limit": limit}
        result: dict[str, Any] = self._call("GET", "/v1/documents", params=params)
        return result

    def delete_document(self, doc_id: str, *, index: str | None = None) -> None:
        self._send(_delete_document(doc_id, index))

    def ready(self) -> bool:
        """True once the server has loaded its model."""
        return self._http.get("/readyz").status_code == 200

    # Human review (a reviewer or admin key)

    def list_reviews(self, **filters: Any) -> dict[str, Any]:
        """A page of review items; filters: status, reason, assignee, min_age_s, max_age_s,
        overdue, offset, limit."""
        result: dict[str, Any] = self._send(_list_reviews(filters))
        return result

    def get_review(self, review_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._send(_get_review(review_id))
        return result

    def claim_review(self, review_id: str | None = None) -> dict[str, Any] | None:
        """Claim an item (None: the most urgent one; None back when the queue is empty)."""
        result: dict[str, Any] | None = self._send(_claim_review(review_id))
        return result

    def release_review(self, review_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._send(_release_review(review_id))
        return result

    def resolve_review(
        self,
        review_id: str,
        action: str,
        *,
        edited_answer: str | None = None,
        ratings: dict[str, int | None] | None = None,
        comment: str = "",
        escalate_to: str | None = None,
    ) -> dict[str, Any]:
        """approve, edit (with ``edited_answer``), reject or escalate a claimed item; an
        escalation goes to ``escalate_to`` (a reviewer's name), else to the admins."""
        request = _resolve_review(review_id, action, edited_answer, ratings, comment, escalate_to)
        result: dict[str, Any] = self._send(request)
        return result

    def export_reviews(self, *, format: str = "jsonl", status: str | None = None) -> str:
        """Every item (or those of one status) with its ratings, as JSON lines or CSV text."""
        text: str = self._send(_export_reviews(format, status))
        return text

    # Feedback and risk control

    def feedback(self, answer_id: str, rating: str, *, comment: str = "") -> dict[str, Any]:
        """Thumbs ``up`` or ``down`` on an answer (its ``request_id``, or a grounded OpenAI
        response's ``id``), with an optional comment (an app key)."""
        result: dict[str, Any] = self._send(_feedback(answer_id, rating, comment))
        return result

    def risk_status(self) -> list[dict[str, Any]]:
        """Per collection: labels, calibration version, certified threshold, risk and bound,
        coverage (a reviewer key)."""
        result: list[dict[str, Any]] = self._send(_risk_status())
        return result

    def refit_calibration(self, index: str) -> dict[str, Any]:
        """Refit one collection's calibration now and report before/after (an admin key)."""
        result: dict[str, Any] = self._send(_refit(index))
        return result


class AsyncClient:
    """Asynchronous client with the same methods as ``Client``, awaited."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        api_key: str | None = None,
        reviewer: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        """``reviewer`` names you to a server running without API keys (loopback only)."""
        headers = _headers(api_key, reviewer)
        self._http = httpx.AsyncClient(
            base_url=base_url, timeout=timeout_s, headers=headers, transport=transport
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, method: str, url: str, **kwargs: Any) -> Any:
        return _read(await self._http.request(method, url, **kwargs))

    async def _send(self, r: _Request) -> Any:
        response = await self._http.request(r.method, r.path, params=r.params, json=r.json)
        return _read(response, r.is_text)

    async def ask(self, question: str, **options: Any) -> Result:
        return Result.from_dict(
            await self._call("POST", "/v1/ask", json=_ask_body(question, options))
        )

    async def ask_stream(self, question: str, **options: Any) -> AsyncIterator[AskEvent]:
        """``Client.ask_stream``, awaited: ``async for event in client.ask_stream(...)``."""
        body = {**_ask_body(question, options), "stream": True}
        async with self._http.stream("POST", "/v1/ask", json=body) as response:
            if not response.is_success:
                await response.aread()
                _read(response)
            parser = _SSEParser()
            async for line in response.aiter_lines():
                if (message := parser.feed(line)) and (decoded := _ask_event(*message)):
                    yield decoded

    async def add_text(
        self,
        doc_id: str,
        text: str,
        *,
        metadata: dict[str, Any] | None = None,
        index: str | None = None,
    ) -> dict[str, Any]:
        body = {"doc_id": doc_id, "text": text, "metadata": metadata or {}}
        result: dict[str, Any] = await self._call(
            "POST", "/v1/documents", json=body, params=_index_params(index)
        )
        return result

    async def add_file(
        self, path: str | Path, *, doc_id: str | None = None, index: str | None = None
    ) -> dict[str, Any]:
        files, data = _file_parts(Path(path), doc_id)
        result: dict[str, Any] = await self._call(
            "POST", "/v1/documents", files=files, data=data, params=_index_params(index)
        )
        return result

    async def list_documents(
        self, *, index: str | None = None, offset: int = 0, limit: int = 100
    ) -> dict[str, Any]:
        params = {**_index_params(index), "offset": offset, "limit": limit}
        result: dict[str, Any] = await self._call("GET", "/v1/documents", params=params)
        return result

    async def delete_document(self, doc_id: str, *, index: str | None = None) -> None:
        await self._send(_delete_document(doc_id, index))

    async def ready(self) -> bool:
        return (await self._http.get("/readyz")).status_code == 200

    # Human review (a reviewer or admin key)

    async def list_reviews(self, **filters: Any) -> dict[str, Any]:
        result: dict[str, Any] = await self._send(_list_reviews(filters))
        return result

    async def get_review(self, review_id: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._send(_get_review(review_id))
        return result

    async def claim_review(self, review_id: str | None = None) -> dict[str, Any] | None:
        result: dict[str, Any] | None = await self._send(_claim_review(review_id))
        return result

    async def release_review(self, review_id: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._send(_release_review(review_id))
        return result

    async def resolve_review(
        self,
        review_id: str,
        action: str,
        *,
        edited_answer: str | None = None,
        ratings: dict[str, int | None] | None = None,
        comment: str = "",
        escalate_to: str | None = None,
    ) -> dict[str, Any]:
        request = _resolve_review(review_id, action, edited_answer, ratings, comment, escalate_to)
        result: dict[str, Any] = await self._send(request)
        return result

    async def export_reviews(self, *, format: str = "jsonl", status: str | None = None) -> str:
        text: str = await self._send(_export_reviews(format, status))
        return text

    # Feedback and risk control

    async def feedback(self, answer_id: str, rating: str, *, comment: str = "") -> dict[str, Any]:
        result: dict[str, Any] = await self._send(_feedback(answer_id, rating, comment))
        return result

    async def risk_status(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._send(_risk_status())
        return result

    async def refit_calibration(self, index: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._send(_refit(index))
        return result
