"""Raw generation for the OpenAI routes: the loaded model's completions straight from the engine
client (``n`` choices, stop strings, log-probabilities, usage), whole or streamed as chunks."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel
from sse_starlette import ServerSentEvent

from engine import (
    CompletionOutput,
    EngineClient,
    FinishReason,
    RequestOutput,
    SamplingParams,
    streamable_text,
)
from rag import logs
from rag.errors import (
    DeadlineExceededError,
    EngineUnavailableError,
)
from rag.pipeline import Pipeline
from rag.server.disconnect import unless_disconnected
from rag.server.openai.errors import error_event
from rag.server.openai.logprobs import Tokens, token_logprobs
from rag.server.openai.schemas import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionResponse,
    ChatLogprobs,
    ChatMessageOut,
    CompletionChoice,
    CompletionChunk,
    CompletionLogprobs,
    CompletionResponse,
    Delta,
    GenerationRequest,
    PromptTokensDetails,
    Usage,
)
from rag.server.openai.sse import chunk_event, done, json_response
from rag.server.state import ServerState
from rag.server.streaming import event_stream


@dataclass(slots=True)
class _ChoiceState:
    """What a stream has sent of one choice."""

    text: str = ""
    tokens: int = 0
    offset: int = 0
    """Characters of the completion the sent tokens cover (``text_offset``)."""
    finished: bool = False


def _finish_reason(reason: FinishReason | None) -> str | None:
    return None if reason is None else reason.value


@dataclass(slots=True)
class RawJob:
    """One request for the engine: how its outputs are shaped."""

    chat: bool
    model: str
    n: int
    stops: list[str]
    top_k: int | None
    """Alternatives per token; None: no log-probabilities asked."""
    tokens: Tokens
    include_usage: bool
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def response_id(self) -> str:
        return ("chatcmpl-" if self.chat else "cmpl-") + self.id

    def logprobs(
        self, out: CompletionOutput, start: int, end: int, offset: int
    ) -> ChatLogprobs | CompletionLogprobs | None:
        """Log-probabilities of tokens ``start:end`` of ``out`` (``offset``: characters before
        them, for ``text_offset``); None when none were asked."""
        if self.top_k is None:
            return None
        return token_logprobs(self.tokens, out, start, end, offset, self.top_k, chat=self.chat)

    def response(self, finals: list[RequestOutput]) -> BaseModel:
        choices: list[Any] = []
        for p, final in enumerate(finals):
            for out in final.outputs:
                index = p * self.n + out.index
                logprobs = self.logprobs(out, 0, len(out.token_ids), 0)
                reason = _finish_reason(out.finish_reason) or "stop"
                if self.chat:
                    assert logprobs is None or isinstance(logprobs, ChatLogprobs)
                    choices.append(
                        ChatChoice(
                            index=index,
                            message=ChatMessageOut(content=out.text),
                            logprobs=logprobs,
                            finish_reason=reason,
                        )
                    )
                else:
                    assert logprobs is None or isinstance(logprobs, CompletionLogprobs)
                    choices.append(
                        CompletionChoice(
                            index=index, text=out.text, logprobs=logprobs, finish_reason=reason
                        )
                    )
        choices.sort(key=lambda c: c.index)
        usage = _usage(finals)
        if self.chat:
            return ChatCompletionResponse(
                id=self.response_id,
                created=self.created,
                model=self.model,
                choices=choices,
                usage=usage,
            )
        return CompletionResponse(
            id=self.response_id,
            created=self.created,
            model=self.model,
            choices=choices,
            usage=usage,
        )

    def chunk(
        self,
        index: int,
        text: str | None,
        *,
        role: bool = False,
        logprobs: ChatLogprobs | CompletionLogprobs | None = None,
        finish_reason: str | None = None,
    ) -> ServerSentEvent:
        if self.chat:
            assert logprobs is None or isinstance(logprobs, ChatLogprobs)
            delta = Delta(role="assistant" if role else None, content=text)
            choice = ChatChunkChoice(
                index=index, delta=delta, logprobs=logprobs, finish_reason=finish_reason
            )
            return chunk_event(
                ChatCompletionChunk(
                    id=self.response_id, created=self.created, model=self.model, choices=[choice]
                )
            )
        assert logprobs is None or isinstance(logprobs, CompletionLogprobs)
        text_choice = CompletionChoice(
            index=index, text=text or "", logprobs=logprobs, finish_reason=finish_reason
        )
        return chunk_event(
            CompletionChunk(
                id=self.response_id, created=self.created, model=self.model, choices=[text_choice]
            )
        )

    def usage_chunk(self, usage: Usage) -> ServerSentEvent:
        chunk: ChatCompletionChunk | CompletionChunk
        if self.chat:
            chunk = ChatCompletionChunk(
                id=self.response_id, created=self.created, model=self.model, choices=[], usage=usage
            )
        else:
            chunk = CompletionChunk(
                id=self.response_id, created=self.created, model=self.model, choices=[], usage=usage
            )
        return chunk_event(chunk)


def _usage(finals: Sequence[RequestOutput | None]) -> Usage:
    prompt = sum(f.num_prompt_tokens for f in finals if f is not None)
    completion = sum(f.num_completion_tokens for f in finals if f is not None)
    cached = sum(f.num_cached_tokens for f in finals if f is not None)
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=cached),
    )


def _deadline(pipeline: Pipeline, body: GenerationRequest) -> float | None:
    timeout = body.timeout_s or pipeline.settings.server.request_timeout_s
    return None if timeout is None else asyncio.get_running_loop().time() + timeout


async def _outputs(
    engine: EngineClient,
    prompts: list[str],
    params: SamplingParams,
    request_id: str,
    deadline: float | None,
) -> AsyncGenerator[tuple[int, RequestOutput], None]:
    """Every prompt's outputs as they grow, tagged with the prompt's position. One engine
    request per prompt, all at once (they share the engine's batches); leaving early, or the
    deadline passing, aborts them all."""
    queue: asyncio.Queue[tuple[int, RequestOutput | Exception | None]] = asyncio.Queue()
    tag = uuid.uuid4().hex[:8]  # engine ids stay unique when a caller reuses its request id

    async def pump(position: int, prompt: str) -> None:
        engine_id = f"{request_id}-{tag}" + (f"-{position}" if len(prompts) > 1 else "")
        stream = engine.generate(prompt, params, engine_id)
        try:
            async for output in stream:
                queue.put_nowait((position, output))
            queue.put_nowait((position, None))
        except Exception as exc:
            queue.put_nowait((position, exc))
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()

    tasks = [asyncio.create_task(pump(p, prompt)) for p, prompt in enumerate(prompts)]
    try:
        running = len(tasks)
        while running:
            try:
                async with asyncio.timeout_at(deadline):
                    position, item = await queue.get()
            except TimeoutError as exc:
                raise DeadlineExceededError(
                    "no completion within the deadline; the generation was stopped"
                ) from exc
            if item is None:
                running -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield position, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _finals(
    engine: EngineClient,
    prompts: list[str],
    params: SamplingParams,
    request_id: str,
    deadline: float | None,
) -> list[RequestOutput]:
    finals: list[RequestOutput | None] = [None] * len(prompts)
    async with aclosing(_outputs(engine, prompts, params, request_id, deadline)) as outputs:
        async for position, output in outputs:
            finals[position] = output
    done = [f for f in finals if f is not None and f.finished]
    if len(done) != len(prompts):
        raise EngineUnavailableError("the engine ended a request without a final output")
    return done


async def generate_raw(
    request: Request,
    pipeline: Pipeline,
    state: ServerState,
    job: RawJob,
    prompts: list[str],
    params: SamplingParams,
    body: GenerationRequest,
) -> Response:
    request_id: str = request.state.request_id
    deadline = _deadline(pipeline, body)
    logs.note(
        model=pipeline.engine.model_name,
        prompt="\n".join(prompts),
        prompts=len(prompts),
        n=params.n,
        temperature=params.temperature,
        top_p=params.top_p,
        max_tokens=params.max_tokens,
        seed=params.seed,
        stream=body.stream,
    )
    if body.stream:
        state.admission.check()  # refuse with a status code while one can still be sent
        stream = _raw_stream(request, pipeline, state, job, prompts, params, deadline)
        return event_stream(stream, state.settings, sep="\n")
    async with state.admission.slot():
        finals = await unless_disconnected(
            request, _finals(pipeline.engine, prompts, params, request_id, deadline)
        )
    return json_response(job.response(finals))


async def _raw_stream(
    request: Request,
    pipeline: Pipeline,
    state: ServerState,
    job: RawJob,
    prompts: list[str],
    params: SamplingParams,
    deadline: float | None,
) -> AsyncIterator[ServerSentEvent]:
    """Chunks of text as it is generated; a client that leaves cancels this generator, which
    aborts the generation."""
    request_id: str = request.state.request_id
    sent = [_ChoiceState() for _ in range(len(prompts) * job.n)]
    finals: list[RequestOutput | None] = [None] * len(prompts)
    try:
        async with state.admission.slot(checked=True):
            if job.chat:
                for index in range(job.n):
                    yield job.chunk(index, "", role=True)
            generated = _outputs(pipeline.engine, prompts, params, request_id, deadline)
            async with aclosing(generated) as outputs:  # closed (aborted) when we are
                async for position, output in outputs:
                    finals[position] = output
                    for out in output.outputs:
                        index = position * job.n + out.index
                        event = _advance(job, sent[index], index, out)
                        if event is not None:
                            yield event
            if job.include_usage:
                yield job.usage_chunk(_usage(finals))
    except Exception as exc:
        yield error_event(request, exc)
    yield done()


def _advance(
    job: RawJob, sent: _ChoiceState, index: int, out: CompletionOutput
) -> ServerSentEvent | None:
    """The chunk that brings a client's copy of one choice up to ``out``, if any."""
    if sent.finished:
        return None
    finished = out.finish_reason is not None
    text = out.text if finished else streamable_text(out.text, job.stops)
    delta = ""
    if len(text) > len(sent.text) and text.startswith(sent.text):
        delta = text[len(sent.text) :]
        sent.text = text
    start, end = sent.tokens, len(out.token_ids)
    if not delta and start >= end and not finished:
        return None
    logprobs = job.logprobs(out, start, end, sent.offset) if end > start else None
    if end > start:
        sent.offset += sum(len(job.tokens.text(t)) for t in out.token_ids[start:end])
    sent.tokens = end
    sent.finished = finished
    reason = (_finish_reason(out.finish_reason) or "stop") if finished else None
    return job.chunk(index, delta, logprobs=logprobs, finish_reason=reason)


# ========================================================= grounded answers
