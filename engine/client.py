"""The engine-client seam: what the pipeline and the server need from a generator, asynchronously.

``EngineClient`` streams one request's outputs, aborts it, reports stats and health. Four
implementations ship: ``AsyncEngine`` (our engine, stepped by a background thread; concurrent
requests share its batches), ``ProcessEngine`` (our engine in a child process),
``ThreadedClient`` (any synchronous ``Generator``, such as the transformers baseline, one
request at a time in a worker thread) and ``RemoteClient`` (a remote OpenAI-compatible server:
``engine.remote``). Backends are chosen by name
through a registry (``register_backend`` adds one), not by an if/else in the callers.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from engine.config import EngineConfig
from engine.generator import Generator
from engine.outputs import FinishReason, RequestOutput
from engine.prompts import Prompt
from engine.sampling_params import SamplingParams

if TYPE_CHECKING:
    from engine.llm_engine import EngineStats


class EngineUnavailableError(RuntimeError):
    """The engine's loop has died or the engine was shut down."""


class EngineStartingError(EngineUnavailableError):
    """The generator does not serve yet but is expected to: a remote generator still starting,
    or restarting after it went down. Worth retrying after ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: float = 1.0):
        super().__init__(message)
        self.retry_after_s = retry_after_s


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


class ThreadedClient:
    """A synchronous ``Generator`` behind the client interface: each request runs in a worker
    thread; outputs arrive once, finished. Aborting stops the generation at its next token."""

    def __init__(self, generator: Generator):
        self.generator = generator
        self._aborted: dict[str, threading.Event] = {}
        self._stopped = False

    @property
    def model_name(self) -> str:
        return self.generator.model_name

    @property
    def max_model_len(self) -> int:
        return self.generator.max_model_len

    @property
    def tokenizer(self) -> Any:
        return getattr(self.generator, "tokenizer", None)

    def count_tokens(self, prompt: str) -> int:
        return self.generator.count_tokens(prompt)

    def apply_chat_template(self, messages: list[dict[str, str]]) -> str:
        return self.generator.apply_chat_template(messages)

    async def generate(
        self, prompt: Prompt, params: SamplingParams, request_id: str | None = None
    ) -> AsyncIterator[RequestOutput]:
        self.check_health()
        request_id = request_id or uuid.uuid4().hex
        if request_id in self._aborted:
            raise ValueError(f"request id {request_id!r} is already in use")
        aborted = self._aborted[request_id] = threading.Event()
        given = params.stop_check

        def stop_check(token_ids: Sequence[int]) -> str | None:
            if aborted.is_set():
                return FinishReason.ABORT.value
            return given(token_ids) if given is not None else None

        try:
            output = await asyncio.to_thread(
                self.generator.generate, [prompt], replace(params, stop_check=stop_check)
            )
        finally:
            aborted.set()  # a cancelled caller stops the worker thread at its next token
            self._aborted.pop(request_id, None)
        result = output[0]
        result.request_id = request_id
        for completion in result.outputs:
            if completion.stop_reason == FinishReason.ABORT.value:
                completion.finish_reason, completion.stop_reason = FinishReason.ABORT, None
        yield result

    def abort(self, request_id: str) -> None:
        event = self._aborted.get(request_id)
        if event is not None:
            event.set()

    def stats(self) -> EngineStats | None:
        return None

    def check_health(self) -> None:
        if self._stopped:
            raise EngineUnavailableError("the generator is shut down")

    def shutdown(self) -> None:
        self._stopped = True
        for event in list(self._aborted.values()):
            event.set()


def _engine_backend(config: EngineConfig) -> EngineClient:
    from engine.async_engine import AsyncEngine

    return AsyncEngine(config)


def _engine_process_backend(config: EngineConfig) -> EngineClient:
    from engine.process_client import ProcessEngine

    return ProcessEngine(config)


def _openai_backend(config: EngineConfig) -> EngineClient:
    from engine.remote import RemoteClient

    if config.remote is None:
        raise ValueError("the openai backend needs a remote server (EngineConfig.remote)")
    return RemoteClient(
        config.remote, cache_dir=config.cache_dir, max_model_len=config.max_model_len
    )


def _hf_backend(config: EngineConfig) -> EngineClient:
    from engine.hf_generator import HFGenerator

    return ThreadedClient(HFGenerator(config))


_BACKENDS: dict[str, Callable[[EngineConfig], EngineClient]] = {
    "engine": _engine_backend,
    "engine-process": _engine_process_backend,
    "hf": _hf_backend,
    "openai": _openai_backend,
}


def register_backend(name: str, factory: Callable[[EngineConfig], EngineClient]) -> None:
    """Make ``factory`` buildable by name (an existing name is replaced)."""
    _BACKENDS[name] = factory


def backends() -> tuple[str, ...]:
    return tuple(_BACKENDS)


def build_engine_client(config: EngineConfig, backend: str = "engine") -> EngineClient:
    """Load the model named by ``config`` behind the backend registered as ``backend``:
    ``engine`` (ours: paged KV, continuous batching, stepped by a thread of this process),
    ``engine-process`` (the same engine in a child process, so that its steps never hold this
    process's interpreter lock), ``hf`` (``transformers.generate``, the baseline and the
    fallback for architectures the engine does not implement) or ``openai`` (a remote
    OpenAI-compatible server, ``config.remote``: ``engine.remote``)."""
    try:
        factory = _BACKENDS[backend]
    except KeyError:
        raise ValueError(
            f"unknown generator backend {backend!r}; choose one of {backends()}"
        ) from None
    return factory(config)


def as_engine_client(generator: EngineClient | Generator) -> tuple[EngineClient, bool]:
    """``generator`` behind the client interface, and whether a wrapper was made for it (the
    caller then owns the wrapper and shuts it down; the generator itself stays usable)."""
    try:
        is_client = isinstance(generator, EngineClient)
    except EngineUnavailableError:
        # The protocol check reads the properties: a remote client whose server is still
        # starting cannot tell its model name yet, and only a client would say so.
        is_client = True
    if is_client:
        return cast("EngineClient", generator), False
    from engine.llm_engine import LLMEngine

    if isinstance(generator, LLMEngine):
        from engine.async_engine import AsyncEngine

        return AsyncEngine(generator), True
    return ThreadedClient(cast("Generator", generator)), True
