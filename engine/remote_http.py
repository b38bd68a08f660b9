"""HTTP for the remote generator (``engine.remote``): the server-sent events of a streamed
completion, and opening that stream with retries while nothing has been received."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from engine.errors import EngineUnavailableError, RemoteBusyError, RemoteRequestError
from engine.remote_config import RemoteConfig

MAX_RETRY_AFTER_S = 30.0
"""A 429's Retry-After is honoured up to this."""


class RemoteUnreachableError(EngineUnavailableError):
    """The remote generator could not be reached, or its stream broke: it may be down (an
    answer, even a 5xx, says that it is up)."""


async def sse_data(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """The ``data:`` payloads of a server-sent event stream (one per event)."""
    buffer: list[str] = []
    async for line in lines:
        if not line:
            if buffer:
                yield "\n".join(buffer)
                buffer = []
        elif line.startswith("data:"):
            buffer.append(line[5:].lstrip())
    if buffer:
        yield "\n".join(buffer)


class RetryingStream:
    """``async with``: the streamed response of ``POST completions``, retried while nothing has
    been received (connection errors, timeouts, 429 and 5xx), with exponential backoff."""

    def __init__(self, config: RemoteConfig, http: httpx.AsyncClient, body: dict[str, Any]):
        self.config, self.http, self.body = config, http, body
        self._context: Any = None

    async def __aenter__(self) -> httpx.Response:
        delay = self.config.backoff_s
        for attempt in range(self.config.max_retries + 1):
            last = attempt == self.config.max_retries
            context = self.http.stream("POST", "completions", json=self.body)
            try:
                response = await context.__aenter__()
            except (httpx.TransportError, httpx.TimeoutException) as exc:
                if last:
                    raise RemoteUnreachableError(
                        f"the remote generator at {self.config.base_url} is unreachable: {exc}"
                    ) from exc
                await asyncio.sleep(delay)
                delay *= 2
                continue
            if response.status_code < 400:
                self._context = context
                return response
            await response.aread()
            await context.__aexit__(None, None, None)
            status, message = response.status_code, _error_message(response)
            if status == 429 or status >= 500:
                wait = _retry_after(response, delay)
                if last:
                    if status == 429:
                        raise RemoteBusyError(f"the remote generator is busy: {message}", wait)
                    raise EngineUnavailableError(
                        f"the remote generator answered {status}: {message}"
                    )
                await asyncio.sleep(wait)
                delay *= 2
                continue
            raise RemoteRequestError(f"the remote generator refused the request: {message}", status)
        raise AssertionError("unreachable")

    async def __aexit__(self, *exc: object) -> None:
        if self._context is not None:
            await self._context.__aexit__(*exc)


def _retry_after(response: httpx.Response, default: float) -> float:
    try:
        return min(float(response.headers.get("retry-after", default)), MAX_RETRY_AFTER_S)
    except ValueError:
        return default


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    return json.dumps(body)[:300]
