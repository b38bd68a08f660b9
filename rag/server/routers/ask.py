"""Grounded question answering, whole or streamed as server-sent events."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from sse_starlette import ServerSentEvent

from rag.errors import RagGuardError
from rag.server.calls import CallDep
from rag.server.schemas import AskRequest, AskResponse, ErrorOut
from rag.server.state import PipelineDep
from rag.types import AskEvent, PassagesEvent, TokenEvent, result_of

logger = logging.getLogger(__name__)
router = APIRouter(prefix="/v1", tags=["ask"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (400, 401, 403, 404, 422, 429, 503, 504)
}
_ERRORS[200] = {
    "content": {"text/event-stream": {}},
    "description": "the answer (JSON), or with `stream: true` server-sent events: `passages`, "
    "`token` (repeated), then `result` (the same body as the JSON answer) or `error`",
}


@router.post("/ask", response_model=AskResponse, responses=_ERRORS)
async def ask(body: AskRequest, call: CallDep, pipeline: PipelineDep) -> AskResponse | Response:
    """Retrieve passages for the question and answer from them, with numbered citations.

    When no passage clears the relevance threshold the answer abstains without calling the model.
    A client that disconnects stops its generation; an answer nobody received is never queued
    for review. Beyond the server's waiting queue: 429 with ``Retry-After``; past the deadline:
    504.
    """
    options = body.to_options()
    if body.stream:

        def events(waited_s: float) -> AsyncGenerator[ServerSentEvent, None]:
            return _sse(call.answer(pipeline, body.question, options, waited_s))

        return call.stream(events, failed=_error_event, catch=RagGuardError)
    result = await call.whole(
        lambda waited_s: result_of(call.answer(pipeline, body.question, options, waited_s))
    )
    return AskResponse.from_result(result)


async def _sse(events: AsyncIterator[AskEvent]) -> AsyncGenerator[ServerSentEvent, None]:
    """The answer's events as SSE (an error after the response has started: ``_error_event``)."""
    async for event in events:
        yield _encode(event)


def _error_event(exc: RagGuardError) -> ServerSentEvent:
    return ServerSentEvent(json.dumps({"error": exc.error_type, "detail": str(exc)}), event="error")


def _encode(event: AskEvent) -> ServerSentEvent:
    if isinstance(event, TokenEvent):
        return ServerSentEvent(json.dumps({"text": event.text}), event="token")
    if isinstance(event, PassagesEvent):
        data = {"index": event.index, "passages": [asdict(p) for p in event.passages]}
        return ServerSentEvent(json.dumps(data), event="passages")
    body = AskResponse.from_result(event.result).model_dump_json()
    return ServerSentEvent(body, event="result")
