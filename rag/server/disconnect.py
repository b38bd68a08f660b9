"""Stop work for a client that went away: its generation is aborted, its answer never queued."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request

T = TypeVar("T")


class ClientDisconnected(Exception):
    """The client closed the connection before its answer was ready."""


async def _wait_for_disconnect(request: Request) -> None:
    # The body has been read: the next message on the channel is the client leaving.
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await ``work``; if the client disconnects first, cancel it (which aborts the engine
    requests it made) and raise ``ClientDisconnected``."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_for_disconnect(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, watcher):
            if not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await pending
    if task.cancelled():
        raise ClientDisconnected("the client disconnected; its generation was stopped")
    return task.result()
