"""The engine-client seam: what the pipeline and the server need from a generator, asynchronously.

``EngineClient`` streams one request's outputs, aborts it, reports stats and health. This module
imports no backend. The shipped ones are ``AsyncEngine`` (our engine, stepped by a background
thread; concurrent requests share its batches), ``ProcessEngine`` (our engine in a child
process), ``ThreadedClient`` (any synchronous ``Generator``, one request at a time in a worker
thread) and ``RemoteClient`` (a remote OpenAI-compatible server); ``engine.backends`` builds them
by name.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol, runtime_checkable

from engine.errors import EngineUnavailableError
from engine.outputs import RequestOutput
from engine.prompts import Prompt
from engine.sampling_params import SamplingParams
from engine.stats import EngineStats


@runtime_checkable
class EngineClient(Protocol):
    """An asynchronous generator: stream a request, abort it, stats, health."""

    @property
    def model_name(self) -> str: ...

    @property
    def max_model_len(self) -> int:
        """Context window in tokens (prompt plus completion)."""
        ...

    @property
    def tokenizer(self) -> Any: ...

    def count_tokens(self, prompt: str) -> int: ...

    def apply_chat_template(self, messages: list[dict[str, str]]) -> str: ...

    def generate(
        self, prompt: Prompt, params: SamplingParams, request_id: str | None = None
    ) -> AsyncIterator[RequestOutput]:
        """The request's outputs as they grow; the last has ``finished=True``. Leaving the
        iteration early (``break``, cancellation) aborts the request."""
        ...

    def abort(self, request_id: str) -> None: ...

    def stats(self) -> EngineStats | None:
        """Scheduler and KV-cache counters, or None where the backend has none."""
        ...

    def check_health(self) -> None:
        """Raise ``EngineUnavailableError`` if requests can no longer be served."""
        ...

    def shutdown(self) -> None: ...


async def generate_all(
    client: EngineClient, prompt: Prompt, params: SamplingParams, request_id: str | None = None
) -> RequestOutput:
    """The finished output of one request."""
    last = None
    async for output in client.generate(prompt, params, request_id):
        last = output
    if last is None or not last.finished:
        raise EngineUnavailableError("the engine ended the request without a final output")
    return last
