"""The grounded model ``ragguard``: the question answered by the full pipeline (retrieve,
generate, check, decide, act), returned in OpenAI's shapes with an extra ``ragguard`` field."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel
from sse_starlette import ServerSentEvent

from rag.pipeline import Pipeline
from rag.server.disconnect import unless_disconnected
from rag.server.openai.errors import error_event
from rag.server.openai.logprobs import Tokens
from rag.server.openai.raw import RawJob
from rag.server.openai.schemas import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionResponse,
    ChatMessageOut,
    CompletionChoice,
    CompletionChunk,
    CompletionResponse,
    Delta,
    GenerationRequest,
    Grounding,
    PromptTokensDetails,
    Usage,
)
from rag.server.openai.sse import chunk_event, done, json_response
from rag.server.schemas import AskResponse
from rag.server.state import ServerState
from rag.server.streaming import event_stream
from rag.types import AskOptions, Result, ResultEvent, TokenEvent, result_of


@dataclass(slots=True)
class GroundedJob:
    chat: bool
    model: str
    include_usage: bool
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    """The request id (so the response id names the answer for feedback), else a fresh one."""
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def response_id(self) -> str:
        return ("chatcmpl-" if self.chat else "cmpl-") + self.id

    def as_raw(self) -> RawJob:
        """The shapes of a raw job's chunks, for the grounded stream's deltas."""
        return RawJob(
            chat=self.chat,
            model=self.model,
            n=1,
            stops=[],
            top_k=None,
            tokens=Tokens(None),
            include_usage=self.include_usage,
            id=self.id,
            created=self.created,
        )


def _grounding(result: Result) -> Grounding:
    return Grounding.model_validate(AskResponse.from_result(result).model_dump())


def _grounded_usage(result: Result) -> Usage:
    u = result.usage
    return Usage(
        prompt_tokens=u.prompt_tokens,
        completion_tokens=u.completion_tokens,
        total_tokens=u.prompt_tokens + u.completion_tokens,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=u.cached_prompt_tokens),
    )


def _grounded_finish(result: Result) -> str:
    if not result.abstained and result.samples and result.samples[0].finish_reason == "length":
        return "length"
    return "stop"


async def answer_grounded(
    request: Request,
    pipeline: Pipeline,
    state: ServerState,
    job: GroundedJob,
    question: str,
    options: AskOptions,
    arrival: float,
    body: GenerationRequest,
) -> Response:
    request_id: str = request.state.request_id
    if pipeline.checker is not None:
        pipeline.checker.policy_for(options)  # bad thresholds: a 400 now, not a stream error
    if body.stream:
        state.admission.check()
        stream = _grounded_stream(request, pipeline, state, job, question, options, arrival)
        return event_stream(stream, state.settings, sep="\n")
    async with state.admission.slot() as waited_s:
        degrade = state.degrade(waited_s)
        events = state.telemetry.track(
            pipeline.stream(question, options, request_id=request_id, degrade=degrade),
            arrival,
            waited_s,
        )
        result = await unless_disconnected(request, result_of(events))
    grounding = _grounding(result)
    reason = _grounded_finish(result)
    usage = _grounded_usage(result)
    response: BaseModel
    if job.chat:
        response = ChatCompletionResponse(
            id=job.response_id,
            created=job.created,
            model=job.model,
            choices=[
                ChatChoice(
                    index=0, message=ChatMessageOut(content=result.answer), finish_reason=reason
                )
            ],
            usage=usage,
            ragguard=grounding,
        )
    else:
        response = CompletionResponse(
            id=job.response_id,
            created=job.created,
            model=job.model,
            choices=[CompletionChoice(index=0, text=result.answer, finish_reason=reason)],
            usage=usage,
            ragguard=grounding,
        )
    return json_response(response)


async def _grounded_stream(
    request: Request,
    pipeline: Pipeline,
    state: ServerState,
    job: GroundedJob,
    question: str,
    options: AskOptions,
    arrival: float,
) -> AsyncIterator[ServerSentEvent]:
    """The answer's text as generated, then a last chunk with the finish reason and the
    ``ragguard`` field (whose ``answer`` is authoritative: a withheld answer is replaced)."""
    request_id: str = request.state.request_id
    shape = job.as_raw()
    try:
        async with state.admission.slot(checked=True) as waited_s:
            if job.chat:
                yield shape.chunk(0, "", role=True)
            degrade = state.degrade(waited_s)
            events = pipeline.stream(question, options, request_id=request_id, degrade=degrade)
            streamed = ""
            async for event in state.telemetry.track(events, arrival, waited_s):
                if isinstance(event, TokenEvent) and event.text:
                    streamed += event.text
                    yield shape.chunk(0, event.text)
                elif isinstance(event, ResultEvent):
                    result = event.result
                    rest = ""
                    if result.answer.startswith(streamed):  # e.g. nothing was generated
                        rest = result.answer[len(streamed) :]
                    yield _final_grounded_chunk(job, result, rest)
                    if job.include_usage:
                        yield shape.usage_chunk(_grounded_usage(result))
    except Exception as exc:
        yield error_event(request, exc)
    yield done()


def _final_grounded_chunk(job: GroundedJob, result: Result, text: str) -> ServerSentEvent:
    reason = _grounded_finish(result)
    grounding = _grounding(result)
    chunk: ChatCompletionChunk | CompletionChunk
    if job.chat:
        choice = ChatChunkChoice(index=0, delta=Delta(content=text), finish_reason=reason)
        chunk = ChatCompletionChunk(
            id=job.response_id,
            created=job.created,
            model=job.model,
            choices=[choice],
            ragguard=grounding,
        )
    else:
        text_choice = CompletionChoice(index=0, text=text, finish_reason=reason)
        chunk = CompletionChunk(
            id=job.response_id,
            created=job.created,
            model=job.model,
            choices=[text_choice],
            ragguard=grounding,
        )
    return chunk_event(chunk)


# ============================================================ serialization
