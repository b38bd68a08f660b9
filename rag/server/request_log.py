"""The request id and the request log: one structured record per HTTP request, when it ends.

Pure ASGI (no ``BaseHTTPMiddleware``), so a streamed answer is logged when its last event has
been sent, with the latency the client saw, and a cancelled request still leaves its record.
The record holds the request id, method, route template, status, latency and what the stages
noted (``rag.logs.note``: index, sampling parameters, decision, confidence, tokens, review id)
and, given a ``resources`` reader, what the server holds as the request ends (resident memory,
KV blocks, CUDA memory: ``rag.server.resources``).
Headers are never logged, so neither are API keys; question and answer text only with the
``log_text`` setting.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rag.logs import collecting, redacted

logger = logging.getLogger("ragguard.request")
_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")
HEADER = "x-request-id"


def request_id_from(scope: Scope) -> str:
    """The caller's ``X-Request-ID`` when it is a sane token, else a fresh one."""
    for name, value in scope.get("headers", ()):
        if name == HEADER.encode():
            given = value.decode("latin-1")
            if _REQUEST_ID.fullmatch(given):
                return given
    return uuid.uuid4().hex


class RequestLog:
    """Sets ``request.state.request_id``, echoes it as ``X-Request-ID``, logs the request."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        log_text: bool = False,
        resources: Callable[[], dict[str, Any]] | None = None,
    ):
        self.app = app
        self.log_text = log_text
        self.resources = resources

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id_from(scope)
        scope.setdefault("state", {})["request_id"] = rid
        started = time.perf_counter()
        status: int | None = None

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (HEADER.encode(), rid.encode())]
            await send(message)

        outcome = "completed"
        with collecting() as noted:
            try:
                await self.app(scope, receive, send_with_id)
            except BaseException as exc:
                outcome = "cancelled" if isinstance(exc, asyncio.CancelledError) else "failed"
                if status is None and outcome == "failed":
                    status = 500  # what the app's outermost error handler answers
                raise
            finally:
                self._log(scope, rid, status, time.perf_counter() - started, outcome, noted)

    def _log(
        self,
        scope: Scope,
        rid: str,
        status: int | None,
        latency_s: float,
        outcome: str,
        noted: dict[str, Any],
    ) -> None:
        route = getattr(scope.get("route"), "path", None)
        fields: dict[str, Any] = {
            "event": "request",
            "request_id": rid,
            "method": scope.get("method"),
            "route": route or "unmatched",
            "status": status,
            "latency_ms": round(latency_s * 1000, 1),
        }
        if outcome != "completed":
            fields["outcome"] = outcome
        fields.update(redacted(noted, keep_text=self.log_text))
        fields.update(self._resource_fields())
        logger.log(
            logging.ERROR if outcome == "failed" else logging.INFO,
            "%s %s %s",
            scope.get("method"),
            route or "unmatched",
            status,
            extra={"fields": fields},
        )

    def _resource_fields(self) -> dict[str, Any]:
        if self.resources is None:
            return {}
        try:
            return self.resources()
        except Exception:  # a failed reading must not cost the request its record
            logger.warning("resource fields left out of the request log", exc_info=True)
            return {}
