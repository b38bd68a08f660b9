"""The engine-client seam: the backend registry, and the transformers baseline behind it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pytest

from engine import (
    AsyncEngine,
    EngineClient,
    EngineConfig,
    FinishReason,
    SamplingParams,
    as_engine_client,
    backends,
    build_engine_client,
    generate_all,
    register_backend,
)
from engine.threaded_client import ThreadedClient

if TYPE_CHECKING:
    from engine import HFGenerator, LLMEngine, RequestOutput


def test_backends_are_chosen_by_name_from_a_registry(llm_engine: LLMEngine) -> None:
    assert {"engine", "hf"} <= set(backends())
    made: list[EngineConfig] = []

    def factory(config: EngineConfig, options: object | None) -> EngineClient:
        made.append(config)
        return AsyncEngine(llm_engine)

    register_backend("test-backend", factory)
    config = EngineConfig(device="cpu")
    client = build_engine_client(config, "test-backend")
    try:
        assert made == [config] and isinstance(client, EngineClient)
        text = client.apply_chat_template([{"role": "user", "content": "Name a fruit."}])
        out = asyncio.run(generate_all(client, text, SamplingParams(max_tokens=4)))
        assert out.finished and len(out.outputs[0].token_ids) <= 4
    finally:
        client.shutdown()
    with pytest.raises(ValueError, match="unknown generator backend 'nope'"):
        build_engine_client(config, "nope")


def test_synchronous_generators_are_wrapped_and_clients_passed_through(
    llm_engine: LLMEngine, generator: HFGenerator
) -> None:
    wrapped, owned = as_engine_client(llm_engine)
    assert isinstance(wrapped, AsyncEngine) and owned
    same, owned_again = as_engine_client(wrapped)
    assert same is wrapped and not owned_again
    wrapped.shutdown()
    hf, owned_hf = as_engine_client(generator)
    assert isinstance(hf, ThreadedClient) and owned_hf
    assert hf.model_name == generator.model_name and hf.stats() is None


def test_the_transformers_baseline_streams_its_result_and_can_be_aborted(
    generator: HFGenerator,
) -> None:
    client = ThreadedClient(generator)
    text = client.apply_chat_template([{"role": "user", "content": "Name three colours."}])
    params = SamplingParams(max_tokens=8)
    out = asyncio.run(generate_all(client, text, params, "colours"))
    assert out.request_id == "colours" and out.finished
    assert out.outputs[0].token_ids == generator.generate([text], params)[0].outputs[0].token_ids

    started = threading.Event()

    def note_start(token_ids: Sequence[int]) -> str | None:
        started.set()
        return None

    async def abort_once_started() -> RequestOutput:
        long = SamplingParams(max_tokens=400, ignore_eos=True, stop_check=note_start)
        task = asyncio.create_task(generate_all(client, text, long, "story"))
        while not started.is_set():
            await asyncio.sleep(0.01)
        client.abort("story")
        return await asyncio.wait_for(task, timeout=120)

    aborted = asyncio.run(abort_once_started())
    completion = aborted.outputs[0]
    assert completion.finish_reason is FinishReason.ABORT and len(completion.token_ids) < 400
    client.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        asyncio.run(generate_all(client, text, params))
