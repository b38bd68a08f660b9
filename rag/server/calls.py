"""One call's way through the server, written once for every route that puts work on the model:
``POST /v1/ask`` and the OpenAI routes (the grounded model and raw generation), whole or
streamed. A route takes ``call: CallDep`` and hands its work to it:

- ``call.whole(work)``: ``work(waited_s)`` runs in an admission slot (``rag.server.admission``:
  refused with 429 and ``Retry-After`` when the queue is full) and is cancelled when the client
  disconnects (``rag.server.disconnect``: the engine requests it made are aborted, and the app
  answers 499 to nobody).
- ``call.stream(events, ...)``: refused with a status code now if a question arriving now would
  be, then a server-sent event stream whose ``events(waited_s)`` run in a slot. An error once the
  stream has started becomes the route's error event; a client that leaves cancels the stream,
  which closes ``events`` and so aborts its generation.
- ``call.answer(pipeline, question, options, waited_s)``: the pipeline's events for a question,
  degraded for the time it waited (``rag.server.degrade``) and observed by the metrics
  (``Telemetry.track``: time to first token, inter-token latency, end-to-end and queue time,
  decisions, guard outcomes).

What the request log holds is noted by the stages and routes (``rag.logs.note``); its record
is written by the ``RequestLog`` middleware for every request.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Annotated, TypeVar

from fastapi import Depends, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from rag.pipeline import Pipeline
from rag.server.disconnect import unless_disconnected
from rag.server.state import ServerState, StateDep
from rag.server.streaming import event_stream
from rag.types import AskEvent, AskOptions

T = TypeVar("T")
E = TypeVar("E", bound=Exception)

Events = Callable[[float], AsyncGenerator[ServerSentEvent, None]]
"""A stream's events, given the seconds its call waited for a slot."""


@dataclass(slots=True)
class Call:
    """One request that puts work on the model: its admission, metrics and client."""

    request: Request
    state: ServerState
    arrival: float
    """When the request arrived (``time.perf_counter``), for the latency metrics."""

    @property
    def request_id(self) -> str:
        rid: str = self.request.state.request_id
        return rid

    async def whole(self, work: Callable[[float], Awaitable[T]]) -> T:
        """``work(waited_s)`` in a slot (``OverloadedError`` at once when the queue is full),
        cancelled if the client disconnects first (``ClientDisconnected``)."""
        async with self.state.admission.slot() as waited_s:
            return await unless_disconnected(self.request, work(waited_s))

    def stream(
        self,
        events: Events,
        *,
        failed: Callable[[E], ServerSentEvent],
        catch: type[E],
        last: ServerSentEvent | None = None,
        sep: str | None = None,
    ) -> EventSourceResponse:
        """``events(waited_s)`` as server-sent events, sent as they come. Refused now (429) if
        a question arriving now would be, while a status code can still be sent; an error of
        type ``catch`` after that ends the stream with ``failed(error)``; ``last`` ends every
        stream (OpenAI's ``[DONE]``)."""
        self.state.admission.check()
        sent = self._stream(events, failed, catch, last)
        return event_stream(sent, self.state.settings, sep=sep)

    async def _stream(
        self,
        events: Events,
        failed: Callable[[E], ServerSentEvent],
        catch: type[E],
        last: ServerSentEvent | None,
    ) -> AsyncIterator[ServerSentEvent]:
        # A client that leaves cancels this generator (or closes it): aclosing closes the
        # route's events at once, which aborts their generation.
        try:
            slot = self.state.admission.slot(checked=True)
            async with slot as waited_s, aclosing(events(waited_s)) as stream:
                async for event in stream:
                    yield event
        except catch as exc:
            yield failed(exc)
        if last is not None:
            yield last

    def answer(
        self, pipeline: Pipeline, question: str, options: AskOptions, waited_s: float
    ) -> AsyncIterator[AskEvent]:
        """The pipeline's events for ``question``, with the degradation steps for a question
        admitted after ``waited_s``, observed by the metrics."""
        degrade = self.state.degrade(waited_s)
        events = pipeline.stream(question, options, request_id=self.request_id, degrade=degrade)
        return self.state.telemetry.track(events, self.arrival, waited_s)


def get_call(request: Request, state: StateDep) -> Call:
    return Call(request, state, time.perf_counter())


CallDep = Annotated[Call, Depends(get_call)]
