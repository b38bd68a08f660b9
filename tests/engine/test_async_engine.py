"""AsyncEngine: streaming, continuous batching across callers, cancellation."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator, Iterator
from typing import TYPE_CHECKING

import pytest

from engine import AsyncEngine, SamplingParams

if TYPE_CHECKING:
    from engine import LLMEngine, RequestOutput
    from engine.scheduler import ScheduledBatch


@pytest.fixture
def async_engine(llm_engine: LLMEngine) -> Iterator[AsyncEngine]:
    engine = AsyncEngine(llm_engine)
    yield engine
    engine.shutdown()


def prompt(engine: AsyncEngine, question: str) -> str:
    return engine.engine.apply_chat_template([{"role": "user", "content": question}])


def test_tokens_stream_and_match_the_synchronous_result(async_engine: AsyncEngine) -> None:
    text = prompt(async_engine, "What is the capital of France?")
    params = SamplingParams(max_tokens=12)

    async def collect() -> list[list[int]]:
        return [list(out.outputs[0].token_ids) async for out in async_engine.generate(text, params)]

    steps = asyncio.run(collect())
    # One more token per step (the final step may only drop the end-of-sequence token).
    assert len(steps) >= 2 and all(len(a) < len(b) for a, b in itertools.pairwise(steps[:-1]))
    expected = async_engine.engine.generate([text], params)[0].outputs[0].token_ids
    assert steps[-1] == expected


def test_concurrent_requests_share_steps(
    async_engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = async_engine.engine
    schedule = engine.scheduler.schedule
    requests_per_step: list[int] = []

    def recording_schedule() -> ScheduledBatch:
        # Counted on the engine's thread, when the batch is formed: what the callers see later
        # depends on how the two threads happen to be scheduled on a busy machine.
        batch = schedule()
        requests_per_step.append(len({seq.request_id for seq, _ in batch.items}))
        return batch

    monkeypatch.setattr(engine.scheduler, "schedule", recording_schedule)

    params = SamplingParams(max_tokens=32, ignore_eos=True)

    async def one(question: str) -> int:
        return len(
            (await async_engine.generate_full(prompt(async_engine, question), params))
            .outputs[0]
            .token_ids
        )

    async def main() -> list[int]:
        # The engine's thread steps under the engine's lock: held here (re-entrant: requests are
        # added on this thread) until all three have arrived, so that the test does not depend on
        # how a busy machine schedules the two threads. Then they must share steps.
        with engine._lock:
            questions = ("Name a fruit.", "Name a river.", "Name a city.")
            tasks = [asyncio.create_task(one(q)) for q in questions]
            for _ in range(1000):
                if len(engine.scheduler.waiting) == 3:
                    break
                await asyncio.sleep(0.01)
            assert len(engine.scheduler.waiting) == 3, "the requests did not arrive"
        return await asyncio.gather(*tasks)

    counts = asyncio.run(main())
    assert counts == [32, 32, 32]
    assert max(requests_per_step) >= 2, "the requests never ran in the same step"


def test_leaving_the_stream_aborts_and_frees_blocks(async_engine: AsyncEngine) -> None:
    engine = async_engine.engine

    async def read_two_then_stop() -> None:
        stream = async_engine.generate(
            prompt(async_engine, "Tell me a long story."),
            SamplingParams(max_tokens=200, ignore_eos=True),
        )
        assert isinstance(stream, AsyncGenerator)  # typed AsyncIterator: aclose is ours to call
        async for out in stream:
            if len(out.outputs[0].token_ids) >= 2:
                break
        await stream.aclose()

    asyncio.run(read_two_then_stop())
    assert engine.block_manager.num_used_blocks == 0
    assert not engine.has_unfinished_requests()

    async def cancelled_task() -> None:
        task = asyncio.create_task(
            async_engine.generate_full(
                prompt(async_engine, "Count to one hundred."),
                SamplingParams(max_tokens=200, ignore_eos=True),
            )
        )
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled_task())
    assert engine.block_manager.num_used_blocks == 0


def test_requests_arriving_together_share_the_first_step(llm_engine: LLMEngine) -> None:
    llm_engine.config.max_batch_wait_ms = 1000  # generous: the machine may be busy
    engine = AsyncEngine(llm_engine)
    try:
        text = prompt(engine, "Name a fruit.")

        async def late(delay_s: float) -> float:
            await asyncio.sleep(delay_s)
            out = await engine.generate_full(text, SamplingParams(max_tokens=4))
            assert out.timing.first_scheduled_time is not None
            return out.timing.first_scheduled_time

        async def main() -> tuple[float, float]:
            return await asyncio.gather(late(0.0), late(0.15))

        first, second = asyncio.run(main())
        assert first == second, "the second request missed the first step"
    finally:
        llm_engine.config.max_batch_wait_ms = 0.0
        engine.shutdown()


def test_external_abort_ends_the_stream_and_duplicate_ids_are_refused(
    async_engine: AsyncEngine,
) -> None:
    from engine import FinishReason

    text = prompt(async_engine, "Tell me a long story about the sea.")
    llm = async_engine.engine
    pool = llm.block_manager.num_blocks * llm.config.block_size
    long = min(2000, pool // 2, llm.max_model_len // 2)

    async def main() -> list:
        outputs = []

        async def consume() -> None:
            # Far more tokens than the test waits for: on a busy machine the event loop may see
            # its first output late, and a story that had already ended would leave nothing to
            # refuse or abort (it is aborted long before it gets near this length).
            async for out in async_engine.generate(
                text, SamplingParams(max_tokens=long, ignore_eos=True), request_id="story"
            ):
                outputs.append(out)

        task = asyncio.create_task(consume())
        while not outputs and not task.done():  # running: it has produced a token
            await asyncio.sleep(0.01)
        assert not task.done(), task.exception()
        with pytest.raises(ValueError, match="already in use"):
            async for _ in async_engine.generate(
                text, SamplingParams(max_tokens=5), request_id="story"
            ):
                pass
        async_engine.abort("story")
        await asyncio.wait_for(task, timeout=30)
        return outputs

    outputs = asyncio.run(main())
    last = outputs[-1].outputs[0]
    assert outputs[-1].finished and last.finish_reason is FinishReason.ABORT, (
        len(outputs),
        len(last.token_ids),
        [o.outputs[0].finish_reason for o in outputs[-3:]],
    )
    assert async_engine.engine.block_manager.num_used_blocks == 0


def test_sync_and_async_callers_on_one_engine_both_get_their_results(
    async_engine: AsyncEngine,
) -> None:
    import threading

    engine = async_engine.engine
    text = prompt(async_engine, "Name three colours.")
    sync_result: list[RequestOutput] = []
    worker = threading.Thread(
        target=lambda: sync_result.extend(engine.generate([text], SamplingParams(max_tokens=12)))
    )

    async def main() -> RequestOutput:
        worker.start()
        return await async_engine.generate_full(text, SamplingParams(max_tokens=12))

    async_result = asyncio.run(main())
    worker.join(timeout=60)
    assert sync_result and sync_result[0].finished and async_result.finished
    assert sync_result[0].outputs[0].token_ids == async_result.outputs[0].token_ids
