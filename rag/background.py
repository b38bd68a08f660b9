"""A private event loop on a daemon thread, so synchronous callers can run the async stages.

``Pipeline.ask`` (the SDK, the CLI, ``ragguard eval``'s worker threads) hands its coroutine to this
loop and waits: questions asked from several threads at once run concurrently on the one loop and
share the engine's batches, exactly as they do in the server.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Coroutine, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class BackgroundLoop:
    """Starts its thread on first use; ``close`` stops it."""

    def __init__(self, name: str = "ragguard-loop"):
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=self.name, daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result (its exception is raised here). An
        interrupted wait (Ctrl-C) cancels the coroutine."""
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._ensure())
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def iterate(self, stream: AsyncGenerator[T, None]) -> Iterator[T]:
        """The items of an async generator, each produced on the loop; leaving early closes it
        there."""

        async def step() -> tuple[bool, T | None]:
            try:
                return True, await anext(stream)
            except StopAsyncIteration:
                return False, None

        try:
            while True:
                more, item = self.run(step())
                if not more:
                    return
                yield item  # type: ignore[misc]
        finally:
            self.run(stream.aclose())

    def close(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        if not thread.is_alive():
            loop.close()
