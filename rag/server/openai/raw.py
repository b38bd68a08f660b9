"""Raw generation for the OpenAI routes: the loaded model's completions straight from the engine
client (``n`` choices, stop strings, log-probabilities, usage), whole or streamed as chunks."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from functools import partial

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
from rag.errors import DeadlineExceededError, EngineUnavailableError
from rag.server.calls import Call
from rag.server.openai.errors import error_event
from rag.server.openai.logprobs import Tokens, token_logprobs
from rag.server.openai.reply import Reply
from rag.server.openai.schemas import (
    ChatLogprobs,
    CompletionLogprobs,
    GenerationRequest,
    PromptTokensDetails,
    Usage,
)
from rag.server.openai.sse import done, json_response


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

    reply: Reply
    n: int
    stops: list[str]
    top_k: int | None
    """Alternatives per token; None: no log-probabilities asked."""
    tokens: Tokens

    def logprobs(
        self, out: CompletionOutput, start: int, end: int, offset: int
    ) -> ChatLogprobs | CompletionLogprobs | None:
        """Log-probabilities of tokens ``start:end`` of ``out`` (``offset``: characters before
        them, for ``text_offset``); None when none were asked."""
        if self.top_k is None:
            return None
        chat = self.reply.chat
        return token_logprobs(self.tokens, out, start, end, offset, self.top_k, chat=chat)

    def response(self, finals: list[RequestOutput]) -> BaseModel:
        choices = []
        for p, final in enumerate(finals):
            for out in final.outputs:
                logprobs = self.logprobs(out, 0, len(out.token_ids), 0)
                reason = _finish_reason(out.finish_reason) or "stop"
                choices.append(
                    self.reply.choice(p * self.n + out.index, out.text, reason, logprobs)
                )
        choices.sort(key=lambda c: c.index)
        return self.reply.response(choices, _usage(finals))


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


def _deadline(timeout_s: float | None) -> float | None:
    return None if timeout_s is None else asyncio.get_running_loop().time() + timeout_s


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
    generated: AsyncGenerator[tuple[int, RequestOutput], None], prompts: int
) -> list[RequestOutput]:
    finals: list[RequestOutput | None] = [None] * prompts
    async with aclosing(generated) as outputs:
        async for position, output in outputs:
            finals[position] = output
    done = [f for f in finals if f is not None and f.finished]
    if len(done) != prompts:
        raise EngineUnavailableError("the engine ended a request without a final output")
    return done


async def generate_raw(
    call: Call,
    engine: EngineClient,
    job: RawJob,
    prompts: list[str],
    params: SamplingParams,
    body: GenerationRequest,
    timeout_s: float | None,
) -> Response:
    """The engine's completions of ``prompts``, whole or streamed (``body.stream``), ending at
    the deadline (``body.timeout_s``, else ``timeout_s``)."""
    deadline = _deadline(body.timeout_s or timeout_s)
    logs.note(
        model=engine.model_name,
        prompt="\n".join(prompts),
        prompts=len(prompts),
        n=params.n,
        temperature=params.temperature,
        top_p=params.top_p,
        max_tokens=params.max_tokens,
        seed=params.seed,
        stream=body.stream,
    )
    outputs = partial(_outputs, engine, prompts, params, call.request_id, deadline)
    if body.stream:
        return call.stream(
            lambda _waited_s: _raw_stream(job, outputs(), len(prompts)),
            failed=partial(error_event, call.request),
            catch=Exception,
            last=done(),
            sep="\n",
        )
    finals = await call.whole(lambda _waited_s: _finals(outputs(), len(prompts)))
    return json_response(job.response(finals))


async def _raw_stream(
    job: RawJob, generated: AsyncGenerator[tuple[int, RequestOutput], None], prompts: int
) -> AsyncGenerator[ServerSentEvent, None]:
    """Chunks of text as it is generated; closing this generator (a client that leaves) closes
    ``generated``, which aborts the generation."""
    reply = job.reply
    sent = [_ChoiceState() for _ in range(prompts * job.n)]
    finals: list[RequestOutput | None] = [None] * prompts
    if reply.chat:
        for index in range(job.n):
            yield reply.chunk(index, "", role=True)
    async with aclosing(generated) as outputs:  # closed (aborted) when we are
        async for position, output in outputs:
            finals[position] = output
            for out in output.outputs:
                index = position * job.n + out.index
                event = _advance(job, sent[index], index, out)
                if event is not None:
                    yield event
    if reply.include_usage:
        yield reply.usage_chunk(_usage(finals))


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
    return job.reply.chunk(index, delta, logprobs=logprobs, finish_reason=reason)


# ========================================================= grounded answers
