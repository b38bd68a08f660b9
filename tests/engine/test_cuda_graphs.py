"""Decode steps through ``DecodeGraphs``: the padded static-shape step gives the engine's tokens.

On CPU the step runs eagerly (the arithmetic of padding rows, the scratch block and the bucket
shapes); the ``gpu`` tests capture and replay real CUDA graphs.
"""

from __future__ import annotations

import pytest
import torch

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.cuda_graphs import DecodeGraphs, bucket_sizes
from engine.model_runner import ModelRunner

QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about autumn.",
    "Explain what a KV cache is in one sentence.",
    "List three prime numbers.",
    "Why is the sea salty?",
]


def chat(engine: LLMEngine, question: str) -> str:
    return engine.apply_chat_template([{"role": "user", "content": question}])


def test_bucket_sizes_are_powers_of_two_capped_by_the_limit() -> None:
    assert bucket_sizes(8) == [1, 2, 4, 8]
    assert bucket_sizes(6) == [1, 2, 4, 6]
    assert bucket_sizes(1) == [1]
    assert bucket_sizes(100, smallest=8) == [8, 16, 32, 64, 100]


def test_capturing_without_cuda_is_a_clear_error(llm_engine: LLMEngine) -> None:
    with pytest.raises(ValueError, match="CUDA"):
        DecodeGraphs(llm_engine.model, llm_engine.runner.kv_caches, 0, 4, 8, capture=True)
    with pytest.raises(ValueError, match="cuda_graphs needs a CUDA device"):
        LLMEngine(EngineConfig(device="cpu", cuda_graphs=True))


def test_buckets_round_up_and_refuse_what_they_cannot_hold(llm_engine: LLMEngine) -> None:
    caches = llm_engine.runner.kv_caches
    graphs = DecodeGraphs(llm_engine.model, caches, 100, 8, 512, capture=False)
    assert graphs.block_buckets == [8, 16, 32, 64, 100]  # capped by the pool's 100 blocks
    assert graphs.bucket_for(5, 3) == (8, 8)
    assert graphs.bucket_for(1, 9) == (1, 16)
    assert graphs.bucket_for(9, 1) is None  # more sequences than max_num_seqs
    assert graphs.bucket_for(1, 101) is None  # longer than any bucket
    assert graphs.bucket_for(4, 40) is None  # 4 x 64 gathered blocks > the 100 in the pool


def _static_runner(engine: LLMEngine, max_blocks_per_seq: int) -> ModelRunner:
    return ModelRunner(
        engine.model,
        engine.block_manager.num_blocks,
        engine.config.block_size,
        "cpu",
        engine.runner.kv_caches[0][0].dtype,
        decode_graphs=(8, max_blocks_per_seq),
    )


def _generate_with(
    engine: LLMEngine,
    runner: ModelRunner,
    prompts: list[str],
    params: SamplingParams,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[list[list[list[int]]], list[int]]:
    """Outputs of ``engine`` run on ``runner``, and the batch size of each graph-path step."""
    graphs = runner.decode_graphs
    assert graphs is not None and not graphs.capture
    decode_batches: list[int] = []
    run = graphs.run

    def counting_run(
        shape: tuple[int, int],
        token_ids: list[int],
        positions: list[int],
        block_tables: list[list[int]],
    ) -> torch.Tensor:
        decode_batches.append(len(token_ids))
        return run(shape, token_ids, positions, block_tables)

    monkeypatch.setattr(graphs, "run", counting_run)
    monkeypatch.setattr(engine, "runner", runner)
    # The prefix cache points at blocks of the other runner's KV tensors: forget it before and
    # after (the engine is shared with other tests).
    engine.block_manager.hash_to_block.clear()
    try:
        outputs = engine.generate(prompts, params)
    finally:
        engine.block_manager.hash_to_block.clear()
        monkeypatch.undo()
    return [[c.token_ids for c in o.outputs] for o in outputs], decode_batches


@pytest.mark.slow  # 88 s on 2 cores; the default tier stays under 10 minutes
def test_padded_static_decode_gives_the_eager_engine_tokens(
    llm_engine: LLMEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = llm_engine
    prompts = [chat(engine, q) for q in QUESTIONS]
    greedy = SamplingParams(max_tokens=24)
    expected = [[c.token_ids for c in o.outputs] for o in engine.generate(prompts, greedy)]
    static = _static_runner(engine, 64)
    got, decode_batches = _generate_with(engine, static, prompts, greedy, monkeypatch)

    assert got == expected
    # Five decodes padded to a bucket of 8, and smaller batches as requests finish.
    assert max(decode_batches) == 5 and len(decode_batches) >= 20
    assert static.decode_graphs is not None and (8, 8) in static.decode_graphs.shapes
    # The padding rows wrote only into the scratch block, which no sequence owns.
    assert engine.block_manager.num_used_blocks == 0
    assert static.kv_caches[0][0].shape[0] == engine.block_manager.num_blocks + 1
    # The counters the metrics endpoint shows.
    monkeypatch.setattr(engine, "runner", static)
    stats = engine.stats()
    monkeypatch.undo()
    assert stats.num_cuda_graph_steps == len(decode_batches) and stats.num_cuda_graphs >= 2
    assert engine.stats().num_cuda_graphs == 0  # the eager runner has none

    # Seeded samples forked from one prompt (copy-on-write blocks) match the eager engine's.
    sampled = SamplingParams(n=3, temperature=0.9, top_p=0.9, seed=5, max_tokens=16)
    want = [[c.token_ids for c in o.outputs] for o in engine.generate(prompts[:2], sampled)]
    got, decode_batches = _generate_with(engine, static, prompts[:2], sampled, monkeypatch)
    assert got == want and max(decode_batches) == 6


@pytest.mark.slow  # 44 s on 2 cores
def test_decodes_longer_than_every_bucket_run_eagerly(
    llm_engine: LLMEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = llm_engine
    prompts = [chat(engine, q) for q in QUESTIONS[:3]]
    params = SamplingParams(max_tokens=24)
    expected = [[c.token_ids for c in o.outputs] for o in engine.generate(prompts, params)]
    lengths = [len(engine.prompts.tokenizer(p)["input_ids"]) for p in prompts]
    assert min(lengths) > 2 * engine.config.block_size  # every prompt outgrows 2 blocks
    got, decode_batches = _generate_with(
        engine, _static_runner(engine, 2), prompts, params, monkeypatch
    )
    assert got == expected and decode_batches == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_graph_decode_matches_eager_and_transformers_on_cuda() -> None:
    from engine import HFGenerator

    eager = LLMEngine(EngineConfig(device="cuda", dtype="float32", max_num_seqs=8))
    graphed = LLMEngine(
        EngineConfig(device="cuda", dtype="float32", max_num_seqs=8, cuda_graphs=True)
    )
    reference = HFGenerator(EngineConfig(device="cuda", dtype="float32"))
    prompts = [chat(eager, q) for q in QUESTIONS]
    params = SamplingParams(max_tokens=24)
    want = [o.outputs[0].token_ids for o in eager.generate(prompts, params)]
    got = [o.outputs[0].token_ids for o in graphed.generate(prompts, params)]
    hf = [o.outputs[0].token_ids for o in reference.generate(prompts, params)]
    assert got == want == hf
    graphs = graphed.runner.decode_graphs
    assert graphs is not None and graphs.capture and len(graphs.shapes) >= 2
    # Seeded sampling takes the same path through the graphs and stays reproducible.
    sampled = SamplingParams(n=3, temperature=0.9, top_p=0.9, seed=5, max_tokens=16)
    first = graphed.generate(prompts[:2], sampled)
    second = graphed.generate(prompts[:2], sampled)
    assert [[c.token_ids for c in o.outputs] for o in first] == [
        [c.token_ids for c in o.outputs] for o in second
    ]
    assert graphed.block_manager.num_used_blocks == 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_graphs_in_bfloat16_answer_the_question() -> None:
    engine = LLMEngine(EngineConfig(device="cuda", cuda_graphs=True))
    assert engine.model.lm_head.weight.dtype == torch.bfloat16
    out = engine.generate([chat(engine, QUESTIONS[0])], SamplingParams(max_tokens=12))[0]
    assert "Paris" in out.outputs[0].text


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_async_engine_captures_and_replays_on_its_own_thread() -> None:
    """The server's path: graphs captured and replayed by the engine's background thread while
    several callers stream at once."""
    import asyncio

    from engine import AsyncEngine

    config = EngineConfig(device="cuda", dtype="float32", max_num_seqs=8)
    eager = LLMEngine(config)
    prompts = [chat(eager, q) for q in QUESTIONS]
    params = SamplingParams(max_tokens=20)
    want = [o.outputs[0].token_ids for o in eager.generate(prompts, params)]
    del eager
    engine = AsyncEngine(
        EngineConfig(device="cuda", dtype="float32", max_num_seqs=8, cuda_graphs=True)
    )

    async def one(text: str) -> list[int]:
        last = None
        async for out in engine.generate(text, params):
            last = out
        assert last is not None and last.finished
        return list(last.outputs[0].token_ids)

    async def together() -> list[list[int]]:
        return list(await asyncio.gather(*(one(p) for p in prompts)))

    try:
        got = asyncio.run(together())
        graphs = engine.engine.runner.decode_graphs
        assert got == want
        assert graphs is not None and len(graphs.shapes) >= 1
        assert engine.engine.block_manager.num_used_blocks == 0
    finally:
        engine.shutdown()
