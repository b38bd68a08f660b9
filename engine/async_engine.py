"""``AsyncEngine``: the engine stepped by a background thread, streamed to asyncio callers.

``async for output in engine.generate(prompt, params)`` yields a ``RequestOutput`` after every
step that added tokens to the request; the last one has ``finished=True``. Leaving the loop early
(a ``break``, a cancelled task, a client that disconnected) aborts the request and frees its KV
blocks.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator

from engine.client import EngineClient, generate_all
from engine.config import EngineConfig
from engine.errors import EngineUnavailableError
from engine.llm_engine import LLMEngine
from engine.outputs import RequestOutput
from engine.prompts import Prompt, PromptFacade
from engine.sampling_params import SamplingParams
from engine.stats import EngineStats
from engine.streams import OutputStreams

logger = logging.getLogger(__name__)


class AsyncEngine(PromptFacade):
    """Our engine behind the ``EngineClient`` interface: ``generate``, ``abort``,
    ``check_health``, ``stats``."""

    def __init__(self, engine: LLMEngine | EngineConfig | None = None):
        self.engine = engine if isinstance(engine, LLMEngine) else LLMEngine(engine)
        self.prompts = self.engine.prompts
        self._streams = OutputStreams()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="ragguard-engine", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------- interface
    @property
    def model_name(self) -> str:
        return self.engine.model_name

    async def generate(
        self, prompt: Prompt, params: SamplingParams, request_id: str | None = None
    ) -> AsyncIterator[RequestOutput]:
        """Stream the request's outputs as tokens arrive."""
        self.check_health()
        request_id = request_id or uuid.uuid4().hex
        self._streams.open(request_id)  # a duplicate id raises here
        try:
            self.engine.add_request(
                prompt, params, request_id, sink=lambda out: self._streams.deliver(request_id, out)
            )
        except BaseException:
            self._streams.close(request_id)
            raise
        self._wake.set()
        # aclosing: leaving this stream early closes the inner one at once (abort, free)
        async with contextlib.aclosing(
            self._streams.read(request_id, self.engine.abort)
        ) as outputs:
            async for output in outputs:
                yield output

    async def generate_full(self, prompt: Prompt, params: SamplingParams) -> RequestOutput:
        """The finished output only."""
        return await generate_all(self, prompt, params)

    def abort(self, request_id: str) -> None:
        self.engine.abort(request_id)

    def check_health(self) -> None:
        """Raise if the engine loop has died."""
        if self._error is not None:
            raise EngineUnavailableError(f"the engine loop failed: {self._error!r}") from (
                self._error
            )
        if self._stopped.is_set():
            raise EngineUnavailableError("the engine is shut down")

    def stats(self) -> EngineStats:
        return self.engine.stats()

    def shutdown(self) -> None:
        """Stop the loop; callers still waiting get ``EngineUnavailableError``."""
        self._stopped.set()
        self._wake.set()
        self._thread.join(timeout=10)
        self._streams.fail_all(EngineUnavailableError("the engine is shut down"))

    # ------------------------------------------------------------------ loop
    def _gather_arrivals(self) -> None:
        """Give requests that arrive together a moment to join the first step."""
        config = self.engine.config
        deadline = time.perf_counter() + config.max_batch_wait_ms / 1000
        while (
            time.perf_counter() < deadline
            and len(self.engine.scheduler.waiting) < config.max_num_seqs
            and not self._stopped.is_set()
        ):
            time.sleep(0.002)

    def _loop(self) -> None:
        idle = True
        while not self._stopped.is_set():
            if not self.engine.has_unfinished_requests():
                idle = True
                self._wake.wait(timeout=0.5)
                self._wake.clear()
                continue
            if idle:
                self._gather_arrivals()
                idle = False
            try:
                self.engine.step()  # outputs reach each request's sink
            except BaseException as exc:  # deliver to every waiting caller, then stop
                logger.exception("engine step failed")
                self._error = exc
                self._streams.fail_all(exc)
                return


def build_client(config: EngineConfig, options: object | None = None) -> EngineClient:
    """The ``engine`` backend (it takes no options)."""
    return AsyncEngine(config)
