"""The grounded model ``ragguard``: the question answered by the full pipeline (retrieve,
generate, check, decide, act), returned in OpenAI's shapes with an extra ``ragguard`` field."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from functools import partial

from fastapi.responses import Response
from sse_starlette import ServerSentEvent

from rag.pipeline import Pipeline
from rag.server.calls import Call
from rag.server.openai.errors import error_event
from rag.server.openai.reply import Reply
from rag.server.openai.schemas import GenerationRequest, Grounding, PromptTokensDetails, Usage
from rag.server.openai.sse import done, json_response
from rag.server.schemas import AskResponse
from rag.stages.check import AnswerChecker
from rag.types import AskEvent, AskOptions, Result, ResultEvent, TokenEvent, result_of


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
    call: Call,
    pipeline: Pipeline,
    checker: AnswerChecker | None,
    reply: Reply,
    question: str,
    options: AskOptions,
    body: GenerationRequest,
) -> Response:
    """The grounded model's answer to ``question``, whole or streamed (``body.stream``);
    ``checker`` (the pipeline's, None with guards off) refuses bad thresholds up front."""
    if checker is not None:
        checker.policy_for(options)  # bad thresholds: a 400 now, not a stream error
    if body.stream:

        def events(waited_s: float) -> AsyncGenerator[ServerSentEvent, None]:
            return _grounded_stream(call.answer(pipeline, question, options, waited_s), reply)

        return call.stream(
            events,
            failed=partial(error_event, call.request),
            catch=Exception,
            last=done(),
            sep="\n",
        )
    result = await call.whole(
        lambda waited_s: result_of(call.answer(pipeline, question, options, waited_s))
    )
    reason = _grounded_finish(result)
    choice = reply.choice(0, result.answer, reason)
    return json_response(reply.response([choice], _grounded_usage(result), _grounding(result)))


async def _grounded_stream(
    events: AsyncIterator[AskEvent], reply: Reply
) -> AsyncGenerator[ServerSentEvent, None]:
    """The answer's text as generated, then a last chunk with the finish reason and the
    ``ragguard`` field (whose ``answer`` is authoritative: a withheld answer is replaced)."""
    if reply.chat:
        yield reply.chunk(0, "", role=True)
    streamed = ""
    async for event in events:
        if isinstance(event, TokenEvent) and event.text:
            streamed += event.text
            yield reply.chunk(0, event.text)
        elif isinstance(event, ResultEvent):
            result = event.result
            rest = ""
            if result.answer.startswith(streamed):  # e.g. nothing was generated
                rest = result.answer[len(streamed) :]
            reason = _grounded_finish(result)
            yield reply.chunk(0, rest, finish_reason=reason, ragguard=_grounding(result))
            if reply.include_usage:
                yield reply.usage_chunk(_grounded_usage(result))
