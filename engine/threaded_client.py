"""``ThreadedClient``: a synchronous ``Generator`` (such as the transformers baseline) behind the
``EngineClient`` interface, one request at a time in a worker thread."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any

from engine.errors import EngineUnavailableError
from engine.generator import Generator
from engine.outputs import FinishReason, RequestOutput
from engine.prompts import Prompt
from engine.sampling_params import SamplingParams
from engine.stats import EngineStats


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
