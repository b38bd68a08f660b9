"""ProcessEngine: our engine in a child process, behind the same client interface."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncGenerator, Iterator

import pytest

from engine import (
    EngineClient,
    EngineConfig,
    EngineUnavailableError,
    LLMEngine,
    ProcessEngine,
    PromptTooLongError,
    SamplingParams,
    build_engine_client,
    generate_all,
)

CONFIG = EngineConfig(
    device="cpu", dtype="float32", max_num_seqs=8, kv_cache_memory_bytes=64 << 20, process_nice=3
)


pytestmark = pytest.mark.model  # every test here loads a real model's weights


@pytest.fixture(scope="module")
def process_engine() -> Iterator[ProcessEngine]:
    client = build_engine_client(CONFIG, "engine-process")
    assert isinstance(client, ProcessEngine)
    yield client
    client.shutdown()


def test_the_engine_process_runs_at_the_niceness_asked(process_engine: ProcessEngine) -> None:
    assert process_engine.pid is not None
    stats = process_engine.stats()  # known from the start, not only after a first step
    assert stats is not None and stats.num_kv_blocks > 0
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    assert os.getpriority(os.PRIO_PROCESS, process_engine.pid) == min(19, ours + 3)


def chat(client: EngineClient, question: str) -> str:
    return client.apply_chat_template([{"role": "user", "content": question}])


def test_streams_the_same_greedy_tokens_as_the_engine_in_process(
    process_engine: ProcessEngine, llm_engine: LLMEngine
) -> None:
    assert isinstance(process_engine, EngineClient)
    assert process_engine.model_name == llm_engine.model_name
    assert process_engine.max_model_len == llm_engine.max_model_len
    text = chat(process_engine, "What is the capital of France?")
    assert text == llm_engine.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}]
    )
    params = SamplingParams(max_tokens=12)

    async def collect() -> list[list[int]]:
        return [list(o.outputs[0].token_ids) async for o in process_engine.generate(text, params)]

    steps = asyncio.run(collect())
    assert (
        len(steps) >= 2 and steps[-1] == llm_engine.generate([text], params)[0].outputs[0].token_ids
    )
    stats = process_engine.stats()
    assert stats is not None and stats.num_generated_tokens >= len(steps[-1])
    assert stats.num_steps >= len(steps) and stats.step_time_s > 0  # timed in the child


def test_concurrent_callers_get_their_own_answers(
    process_engine: ProcessEngine, llm_engine: LLMEngine
) -> None:
    questions = ["Name a colour.", "Name a fruit.", "Name a planet."]
    params = SamplingParams(max_tokens=8)

    async def all_three() -> list[list[int]]:
        outs = await asyncio.gather(
            *(generate_all(process_engine, chat(process_engine, q), params) for q in questions)
        )
        return [o.outputs[0].token_ids for o in outs]

    expected = [
        o.outputs[0].token_ids
        for o in llm_engine.generate([chat(process_engine, q) for q in questions], params)
    ]
    assert asyncio.run(all_three()) == expected


def test_leaving_the_stream_aborts_the_request_in_the_child(process_engine: ProcessEngine) -> None:
    async def read_two_then_stop() -> None:
        stream = process_engine.generate(
            chat(process_engine, "Tell me a long story."),
            SamplingParams(max_tokens=400, ignore_eos=True),
        )
        assert isinstance(stream, AsyncGenerator)  # typed AsyncIterator: aclose is ours to call
        async for out in stream:
            if len(out.outputs[0].token_ids) >= 2:
                break
        await stream.aclose()
        # The stats come with the child's next message: ask for one more short answer.
        await generate_all(process_engine, [1, 2, 3], SamplingParams(max_tokens=1))

    asyncio.run(read_two_then_stop())
    stats = process_engine.stats()
    assert stats is not None
    assert stats.num_running == 0 and stats.num_waiting == 0 and stats.num_kv_blocks_used == 0
    assert stats.num_generated_tokens < 400


def test_bad_requests_fail_with_the_engines_errors(process_engine: ProcessEngine) -> None:
    too_long = list(range(100, 100 + process_engine.max_model_len))
    with pytest.raises(PromptTooLongError):
        asyncio.run(generate_all(process_engine, too_long, SamplingParams(max_tokens=4)))
    # Refused by the engine in the child (more KV blocks than its pool holds), raised here.
    with pytest.raises(ValueError, match="KV blocks"):
        asyncio.run(generate_all(process_engine, [1, 2, 3], SamplingParams(max_tokens=4000)))
    process_engine.check_health()


@pytest.mark.slow  # a second child process to kill
def test_a_dead_child_fails_the_waiting_callers_and_the_health_check() -> None:
    client = ProcessEngine(CONFIG)
    try:
        client.check_health()

        async def killed_while_generating() -> None:
            stream = client.generate([5, 6, 7, 8], SamplingParams(max_tokens=1000, ignore_eos=True))
            async for out in stream:
                if out.outputs[0].token_ids:
                    pid = client._process.pid
                    assert pid is not None
                    os.kill(pid, signal.SIGKILL)

        with pytest.raises(EngineUnavailableError):
            asyncio.run(killed_while_generating())
        with pytest.raises(EngineUnavailableError):
            client.check_health()
    finally:
        client.shutdown()
    with pytest.raises(EngineUnavailableError, match="shut down"):
        client.check_health()
