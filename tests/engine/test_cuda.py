"""CUDA paths of the generators: our engine and the transformers baseline on the GPU.
Skipped without CUDA (the CUDA-graph decode has its own tests in test_cuda_graphs.py)."""

from __future__ import annotations

import pytest
import torch

from engine import EngineConfig, SamplingParams

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def test_generator_runs_on_cuda_in_bfloat16() -> None:
    from engine import HFGenerator

    gpu = HFGenerator(EngineConfig(device="cuda"))
    assert gpu.model.dtype == torch.bfloat16 and gpu.model.device.type == "cuda"
    prompt = gpu.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}]
    )
    out = gpu.generate([prompt], SamplingParams(max_tokens=12))[0].outputs[0]
    assert "Paris" in out.text


def test_engine_on_cuda_matches_transformers_on_cuda() -> None:
    from engine import HFGenerator, LLMEngine

    config = EngineConfig(device="cuda", dtype="float32")
    engine, reference = LLMEngine(config), HFGenerator(config)
    prompts = [
        engine.apply_chat_template([{"role": "user", "content": q}])
        for q in ("What is the capital of France?", "Name a colour of the sky.", "What is 2 + 2?")
    ]
    params = SamplingParams(max_tokens=16)
    ours = [o.outputs[0].token_ids for o in engine.generate(prompts, params)]
    theirs = [o.outputs[0].token_ids for o in reference.generate(prompts, params)]
    assert ours == theirs
    assert engine.runner.kv_caches[0][0].device.type == "cuda" and torch.cuda.is_available()


def test_engine_in_bfloat16_on_cuda_answers_and_frees_its_blocks() -> None:
    from engine import LLMEngine

    engine = LLMEngine(EngineConfig(device="cuda"))
    assert engine.model.lm_head.weight.dtype == torch.bfloat16
    prompt = engine.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}]
    )
    greedy, sampled = engine.generate(
        [prompt, prompt],
        [
            SamplingParams(max_tokens=12),
            SamplingParams(n=4, temperature=0.8, seed=3, max_tokens=12),
        ],
    )
    assert "Paris" in greedy.outputs[0].text
    assert len(sampled.outputs) == 4
    assert engine.block_manager.num_used_blocks == 0
    stats = engine.stats()  # the device's memory: weights and KV cache at least
    allocated, reserved = stats.cuda_memory_allocated_bytes, stats.cuda_memory_reserved_bytes
    assert allocated is not None and reserved is not None
    assert reserved >= allocated >= engine.config.kv_cache_memory_bytes
    assert stats.gpu_utilization is None or 0 <= stats.gpu_utilization <= 1  # None: no NVML


def test_int8_engine_on_cuda_follows_the_bf16_one() -> None:
    from engine import LLMEngine
    from engine.layers.quantization import weight_bytes

    bf16 = LLMEngine(EngineConfig(device="cuda", kv_cache_memory_bytes=64 << 20))
    int8 = LLMEngine(
        EngineConfig(device="cuda", quantization="int8", kv_cache_memory_bytes=64 << 20)
    )
    assert weight_bytes(int8.model) < 0.55 * weight_bytes(bf16.model)
    questions = ("What is the capital of France?", "Name a colour of the sky.", "What is 2 + 2?")
    prompts = [bf16.apply_chat_template([{"role": "user", "content": q}]) for q in questions]
    params = SamplingParams(max_tokens=1)
    first = [o.outputs[0].token_ids for o in bf16.generate(prompts, params)]
    assert [o.outputs[0].token_ids for o in int8.generate(prompts, params)] == first
