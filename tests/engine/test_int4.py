"""int4 weight-only layers against float, and the int4 engine against the float one."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine import EngineConfig, LLMEngine, SamplingParams, weight_formats
from engine.layers import cpu_kernels
from engine.layers.int4 import (
    Int4Embedding,
    Int4Linear,
    dequantize_int4,
    group_size_for,
    kernel_pack_rows,
    quantize_int4,
    quantize_linears_int4,
)
from engine.layers.quantization import Int8Linear, weight_bytes
from engine.model_loader import ModelSource, resolve_model
from engine.weight_formats import (
    a_four_bit_file,
    all_exact_in_int4,
    gguf_decoder_types,
    resolve_quantization,
)
from tests.engine.test_llm_engine import QUESTIONS
from tests.engine.test_quantization import check_the_dense_path


def test_groups_are_gguf_blocks_of_32() -> None:
    assert group_size_for(1536) == group_size_for(576) == group_size_for(96) == 32
    with pytest.raises(ValueError, match="divisible"):
        group_size_for(100)


def test_a_gguf_q4_block_comes_back_with_its_own_codes() -> None:
    """Weights dequantized from Q4_1 blocks (``d * q + m``, q in 0..15, one d and m per 32
    columns) that span their 16 levels re-quantize to the same codes, and so to the same weights
    up to float rounding: int4 adds no error of its own to a Q4_1 GGUF."""
    torch.manual_seed(0)
    codes = torch.randint(0, 16, (8, 128), dtype=torch.int32)
    codes[:, ::32], codes[:, 1::32] = 0, 15  # every block spans its range
    d = torch.rand(8, 4, 1) * 0.05 + 0.001
    m = torch.randn(8, 4, 1) * 0.1
    weight = (codes.reshape(8, 4, 32).float() * d + m).reshape(8, 128)
    q, scales, zeros = quantize_int4(weight, group_size_for(128))
    assert torch.equal(q, codes)
    assert torch.allclose(dequantize_int4(q, scales, zeros, 32), weight, atol=1e-6)


def test_int4_weights_round_trip_within_half_a_step_of_their_group() -> None:
    torch.manual_seed(0)
    weight = torch.randn(48, 256) * torch.linspace(0.01, 3.0, 48)[:, None] + 0.5
    q, scales, zeros = quantize_int4(weight, 64)
    assert q.dtype == torch.int32 and int(q.min()) >= 0 and int(q.max()) <= 15
    assert scales.shape == zeros.shape == (48, 4)
    error = (dequantize_int4(q, scales, zeros, 64) - weight).abs().reshape(48, 4, 64)
    assert bool((error <= scales[..., None] / 2 + 1e-5).all())


@pytest.mark.parametrize("bias", [False, True])
def test_int4_linear_matches_float_within_its_precision(bias: bool) -> None:
    """Sixteen levels per group: the product is within 10% of float's, and equal (up to the
    bf16 activations the kernel takes) to the product with the dequantized weight."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(256, 384, bias=bias)
    x = torch.randn(5, 3, 256)
    quantized = Int4Linear(linear)
    q, scales, zeros = quantize_int4(linear.weight, quantized.group_size)
    dequantized = dequantize_int4(q, scales, zeros, quantized.group_size)
    with torch.no_grad():
        expected, got = linear(x), quantized(x)
        exact = torch.nn.functional.linear(x, dequantized, linear.bias)
    assert got.shape == expected.shape and got.dtype == torch.float32
    assert float((got - expected).norm() / expected.norm()) < 0.1
    assert float((got - exact).norm() / exact.norm()) < 0.01


def test_the_int4_embedding_widens_the_rows_it_looks_up() -> None:
    """Rows are the dequantized int4 weights (scales and offsets in bf16); the table holds about
    5 bits a weight."""
    torch.manual_seed(0)
    table = torch.nn.Embedding(100, 64)
    embedding = Int4Embedding(table)
    ids = torch.tensor([[0, 5], [99, 5]])
    q, scales, zeros = quantize_int4(table.weight, 32)
    rounded = (scales.bfloat16().float(), zeros.bfloat16().float())
    expected = dequantize_int4(q, *rounded, 32)[ids]
    assert torch.equal(embedding(ids), expected)
    assert weight_bytes(embedding) <= 100 * 64 * 5 / 8


@pytest.mark.parametrize("bias", [False, True])
def test_a_prefill_chunk_multiplies_the_widened_weight(bias: bool) -> None:
    """From ``DENSE_ROWS`` rows on, the weight is read back out of the kernel's packing (its
    layout found on this machine: blocks of 64 rows with AVX-512) and multiplied densely: the
    very weights the kernel uses, so both agree with float32's to bf16 precision."""
    if kernel_pack_rows() is None:  # then the layer never widens
        pytest.skip("this PyTorch build packs int4 otherwise: prefill chunks use the kernel")
    torch.manual_seed(0)
    linear = torch.nn.Linear(96, 192, bias=bias)
    quantized = Int4Linear(linear)
    q, scales, zeros = quantize_int4(linear.weight, quantized.group_size)
    weight = dequantize_int4(q, scales.bfloat16().float(), zeros.bfloat16().float(), 32)
    assert torch.equal(quantized.dequantized(), weight)
    check_the_dense_path(quantized, weight, linear.bias)


def test_quantize_linears_int4_swaps_every_linear() -> None:
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 32), torch.nn.Sequential(torch.nn.Linear(32, 64))
    )
    assert quantize_linears_int4(model) == 2
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())


@pytest.fixture(scope="module")
def int4_engine() -> LLMEngine:
    return LLMEngine(
        EngineConfig(device="cpu", quantization="int4", kv_cache_memory_bytes=64 << 20)
    )


@pytest.mark.model
def test_the_int4_model_keeps_under_a_fifth_of_the_weight_bytes(
    int4_engine: LLMEngine, llm_engine: LLMEngine
) -> None:
    """The decoder's linear layers in int4 and the LM head (tied to the embeddings) in int8."""
    assert weight_bytes(int4_engine.model) < 0.2 * weight_bytes(llm_engine.model)
    assert isinstance(int4_engine.model.lm_head, Int8Linear)
    assert not int4_engine.model.lm_head.dense_prefill  # its rows are sequences, not tokens
    layer = int4_engine.model.model.layers[0]
    assert not any(isinstance(m, torch.nn.Linear) for m in layer.modules())


@pytest.mark.model
def test_the_int4_engine_agrees_with_the_float_one_on_the_next_token(
    int4_engine: LLMEngine, llm_engine: LLMEngine
) -> None:
    """The float model is SmolLM2's Q4_1 GGUF dequantized, and int4's groups are its blocks:
    only bf16 rounding (of each group's scale and offset, and of the activations) separates
    them. The first token matched on all 21 parity prompts when measured; the bar leaves room
    for a near-tie. Task accuracy is measured by the benchmark (docs/benchmarks.md)."""
    prompts = [llm_engine.apply_chat_template([{"role": "user", "content": q}]) for q in QUESTIONS]
    params = SamplingParams(max_tokens=1, logprobs=5)
    floats = llm_engine.generate(prompts, params)
    int4s = int4_engine.generate(prompts, params)
    same = sum(
        q.outputs[0].token_ids[0] == f.outputs[0].token_ids[0]
        for f, q in zip(floats, int4s, strict=True)
    )
    text = int4_engine.generate(prompts[:1], SamplingParams(max_tokens=24))[0].outputs[0].text
    assert same >= 0.9 * len(prompts), same
    assert len(text.split()) >= 5


def test_auto_is_int4_for_an_all_q4_1_gguf_w4a8_for_another_4_bit_one_else_8_bit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SmolLM2's GGUF stores every decoder matrix in Q4_1: int4 gives them back exactly. Another
    4-bit file (Q4_K_M's Q4_K and Q6_K, the 1.5B's) gets w4a8 where our kernel builds; files
    with 5- or 8-bit matrices (the 0.5B's Q5_0 and Q8_0) and float checkpoints get w8a8 where
    PyTorch's quantized engine is fbgemm, int8 under another engine; a GPU the model's own
    dtype; an explicit choice stands."""
    smollm2 = resolve_model(None)
    assert gguf_decoder_types(Path(smollm2.directory) / str(smollm2.gguf_file)) == {"Q4_1"}
    assert resolve_quantization("auto", smollm2, "cpu") == "int4"
    assert resolve_quantization("auto", smollm2, "cuda:0") is None
    assert resolve_quantization("int8", smollm2, "cpu") == "int8"
    assert resolve_quantization(None, smollm2, "cpu") is None
    checkpoint = ModelSource("float", str(tmp_path))
    if "x86" in torch.backends.quantized.supported_engines:
        monkeypatch.setattr(torch.backends.quantized, "engine", "x86")
        assert resolve_quantization("auto", checkpoint, "cpu") == "w8a8"
        assert resolve_quantization("auto", smollm2, "cpu") == "int4"
    if "qnnpack" in torch.backends.quantized.supported_engines:
        monkeypatch.setattr(torch.backends.quantized, "engine", "qnnpack")
        assert resolve_quantization("auto", checkpoint, "cpu") == "int8"
    assert all_exact_in_int4({"Q4_1"})
    assert not all_exact_in_int4({"Q4_1", "Q6_K"}) and not all_exact_in_int4({"Q4_K"})
    assert not all_exact_in_int4({"Q4_0"}) and not all_exact_in_int4({"Q5_0"})
    assert not all_exact_in_int4(set()) and not all_exact_in_int4({"F16"})
    assert a_four_bit_file({"Q4_K", "Q6_K"}) and a_four_bit_file({"Q4_0"})
    assert not a_four_bit_file({"Q4_K", "Q5_0", "Q6_K", "Q8_0"}) and not a_four_bit_file({"Q6_K"})
    assert not a_four_bit_file(set()) and not a_four_bit_file({"F16"})
    q4_k_m = ModelSource("q4_k_m", str(tmp_path), gguf_file="model.gguf")
    monkeypatch.setattr(weight_formats, "gguf_decoder_types", lambda _: {"Q4_K", "Q6_K"})
    eight_bit = resolve_quantization("auto", checkpoint, "cpu")  # w8a8 or int8, by the engine
    expected = "w4a8" if cpu_kernels.available() else eight_bit
    assert resolve_quantization("auto", q4_k_m, "cpu") == expected
    monkeypatch.setattr(cpu_kernels, "available", lambda: False)  # no compiler, no AVX2
    assert resolve_quantization("auto", q4_k_m, "cpu") == eight_bit


@pytest.mark.model
def test_the_engine_resolves_auto_at_load() -> None:
    engine = LLMEngine(
        EngineConfig(device="cpu", quantization="auto", kv_cache_memory_bytes=8 << 20)
    )
    assert engine.quantization == "int4"
    assert isinstance(engine.model.lm_head, Int8Linear)
