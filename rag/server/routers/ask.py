"""Grounded question answering, whole or streamed as server-sent events."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from sse_starlette import ServerSentEvent

from rag.errors import RagGuardError
from rag.pipeline import Pipeline
from rag.server.disconnect import unless_disconnected
from rag.server.schemas import AskRequest, AskResponse, ErrorOut
from rag.server.state import PipelineDep, ServerState, StateDep
from rag.server.streaming import event_stream
from rag.types import AskEvent, AskOptions, PassagesEvent, TokenEvent, result_of

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
async def ask(
    body: AskRequest, request: Request, pipeline: PipelineDep, state: StateDep
) -> AskResponse | Response:
    """Retrieve passages for the question and answer from them, with numbered citations.

    When no passage clears the relevance threshold the answer abstains without calling the model.
    A client that disconnects stops its generation; an answer nobody received is never queued
    for review. Beyond the server's waiting queue: 429 with ``Retry-After``; past the deadline:
    504.
    """
    arrival = time.perf_counter()
    options = body.to_options()
    request_id: str = request.state.request_id
    if body.stream:
        state.admission.check()  # refuse with a status code while one can still be sent
        stream = _sse(state, pipeline, body.question, options, request_id)
        return event_stream(stream, state.settings)
    async with state.admission.slot() as slot_wait_s:
        events = state.telemetry.track(
            pipeline.stream(
                body.question,
                options,
                request_id=request_id,
                degrade=state.degrade(slot_wait_s),
            ),
            arrival,
            slot_wait_s,
        )
        result = await unless_disconnected(request, result_of(events))
    return AskResponse.from_result(result)


async def _sse(
    state: ServerState, pipeline: Pipeline, question: str, options: AskOptions, request_id: str
) -> AsyncIterator[ServerSentEvent]:
    """Events as SSE; an error after the response has started becomes an ``error`` event. A
    client that leaves cancels this generator, which aborts the generation."""
    arrival = time.perf_counter()
    try:
        async with state.admission.slot(checked=True) as slot_wait_s:
            degrade = state.degrade(slot_wait_s)
            events = pipeline.stream(question, options, request_id=request_id, degrade=degrade)
            async for event in state.telemetry.track(events, arrival, slot_wait_s):
                yield _encode(event)
    except RagGuardError as exc:
        data = json.dumps({"error": exc.error_type, "detail": str(exc)})
        yield ServerSentEvent(data, event="error")


def _encode(event: AskEvent) -> ServerSentEvent:
    if isinstance(event, TokenEvent):
        return ServerSentEvent(json.dumps({"text": event.text}), event="token")
    if isinstance(event, PassagesEvent):
        data = {"index": event.index, "passages": [asdict(p) for p in event.passages]}
        return ServerSentEvent(json.dumps(data), event="passages")
    body = AskResponse.from_result(event.result).model_dump_json()
    return ServerSentEvent(body, event="result")
