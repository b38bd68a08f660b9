"""``OutputStreams``: per-request asyncio queues fed from another thread (an engine's stepping
thread, a pipe's reader), for clients whose outputs arrive off the event loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable

from engine.outputs import RequestOutput


class OutputStreams:
    """The open streams of a client whose outputs arrive on another thread (an engine's
    stepping thread, a pipe's reader): each request's asyncio queue, fed thread-safely."""

    def __init__(self) -> None:
        self._queues: dict[
            str, tuple[asyncio.AbstractEventLoop, asyncio.Queue[RequestOutput | BaseException]]
        ] = {}

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._queues

    def open(self, request_id: str) -> None:
        """A queue for ``request_id`` on the running event loop (a duplicate id raises)."""
        if request_id in self._queues:
            raise ValueError(f"request id {request_id!r} is already in use")
        self._queues[request_id] = (asyncio.get_running_loop(), asyncio.Queue())

    def close(self, request_id: str) -> None:
        self._queues.pop(request_id, None)

    def deliver(self, request_id: str, item: RequestOutput | BaseException) -> None:
        """Hand ``item`` to the request's stream, from any thread (dropped if it has closed)."""
        stream = self._queues.get(request_id)
        if stream is not None:
            loop, queue = stream
            with contextlib.suppress(RuntimeError):  # that caller's loop is gone
                loop.call_soon_threadsafe(queue.put_nowait, item)

    def fail_all(self, exc: BaseException) -> None:
        for request_id in list(self._queues):
            self.deliver(request_id, exc)

    async def read(
        self, request_id: str, abort: Callable[[str], None]
    ) -> AsyncGenerator[RequestOutput, None]:
        """The request's outputs until the finished one; an error delivered is raised. Leaving
        early closes the stream and calls ``abort``."""
        _, queue = self._queues[request_id]
        finished = False
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                finished = item.finished
                yield item
                if finished:
                    return
        finally:
            self.close(request_id)
            if not finished:
                abort(request_id)
