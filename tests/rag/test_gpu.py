"""CUDA paths: GPU generation and faiss-gpu search agree with the CPU. Skipped without CUDA."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine import EngineConfig, SamplingParams
from rag.documents import Chunk, Document
from rag.faiss_store import gpu_available
from rag.index import VectorIndex

pytestmark = pytest.mark.gpu


def test_generator_runs_on_cuda_in_bfloat16() -> None:
    import torch

    from engine.hf_generator import HFGenerator

    gpu = HFGenerator(EngineConfig(device="cuda"))
    assert gpu.model.dtype == torch.bfloat16 and gpu.model.device.type == "cuda"
    prompt = gpu.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}]
    )
    out = gpu.generate([prompt], SamplingParams(max_tokens=12))[0].outputs[0]
    assert "Paris" in out.text


@pytest.mark.skipif(
    not gpu_available(), reason="faiss has no GPU support here (install the gpu extra)"
)
def test_faiss_gpu_search_matches_cpu(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((500, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = VectorIndex.create(tmp_path / "ix", embedding_model="m", dimension=16)
    chunks = [Chunk(f"d#{i}", "d", i, str(i)) for i in range(500)]
    index.write([(Document("d", "t"), chunks, vectors)])
    hits = index.search(vectors[42], 5)
    assert index._vectors._gpu_index is not None, "the search did not run on the GPU copy"
    assert hits[0].chunk.chunk_id == "d#42"
    cpu = vectors @ vectors[42]
    assert [h.chunk.ordinal for h in hits] == list(np.argsort(-cpu)[:5])


def test_engine_on_cuda_matches_transformers_on_cuda() -> None:
    import torch

    from engine.hf_generator import HFGenerator
    from engine.llm_engine import LLMEngine

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
