"""Server-sent event responses that honour the server's shutdown grace period.

On SIGTERM, sse-starlette would cancel every open stream at once; here a stream may go on for
``shutdown_grace_s`` (its generation finishing if it can), and is cancelled after that, which
aborts what remains of its generation. uvicorn's own graceful-shutdown timeout is set a little
longer (``ragguard serve``), so the streams' grace is what decides.
"""

from __future__ import annotations

from collections.abc import AsyncIterable

from sse_starlette import EventSourceResponse, ServerSentEvent

from rag.settings import Settings


def event_stream(
    events: AsyncIterable[ServerSentEvent], settings: Settings, *, sep: str | None = None
) -> EventSourceResponse:
    return EventSourceResponse(
        events, sep=sep, shutdown_grace_period=settings.server.shutdown_grace_s
    )
