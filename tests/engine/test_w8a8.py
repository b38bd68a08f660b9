"""W8A8 layers (int8 weights times int8 activations, fbgemm) against float, and the W8A8 engine
against the float one."""

from __future__ import annotations

import pytest
import torch

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.layers import w8a8
from engine.layers.quantization import DENSE_ROWS, Int8Linear, quantize_weight, weight_bytes
from engine.layers.w8a8 import W8A8Linear, quantize_linears_w8a8
from tests.engine.test_quantization import next_token_agreement


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return float((got - expected).detach().norm() / expected.detach().norm())


def activations(rows: int, width: int) -> torch.Tensor:
    """Rows shaped like a model's: most channels small, a few several times larger."""
    x = torch.randn(rows, width)
    x[:, ::37] *= 4
    return x


@pytest.mark.parametrize("bias", [False, True])
def test_w8a8_linear_matches_float_within_its_precision(bias: bool) -> None:
    """Weights in 8 bits and each row's activations in 7 (fbgemm's reduced range): the product
    stays within a few percent of float's, and the bias is added exactly."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(256, 384, bias=bias)
    quantized = W8A8Linear(linear)
    x = activations(DENSE_ROWS - 1, 256)
    with torch.no_grad():
        expected = linear(x)
        got = quantized(x)
    assert got.shape == expected.shape and got.dtype == torch.float32
    assert relative_error(got, expected) < 0.05
    if bias:  # added after the row's scale is multiplied back, unscaled
        quantized.bias = torch.nn.Parameter(torch.full((384,), 3.0), requires_grad=False)
        with torch.no_grad():
            shifted = quantized(x)
        assert torch.allclose(shifted - got, torch.full_like(got, 3.0) - linear.bias, atol=1e-4)


@pytest.mark.parametrize("bias", [True, False])
def test_each_row_is_quantized_on_its_own_range(bias: bool) -> None:
    """A row's product is bit for bit the same alone and beside others (a decode batch mixes
    sequences; a prompt chunk mixes tokens whose activations differ by orders of magnitude; a
    verification pass adds the guesses' rows): each row is mapped onto the op's whole range by
    its own minimum and maximum, offset rows included."""
    torch.manual_seed(1)
    linear = torch.nn.Linear(128, 64, bias=bias)
    quantized = W8A8Linear(linear)
    small = activations(1, 128)
    others = torch.cat(
        [
            1000 * activations(1, 128),
            activations(5, 128).abs(),  # one-signed rows
            activations(1, 128) + 50.0,  # a row far off centre
            torch.full((1, 128), 2.5),  # a constant row
            torch.zeros(1, 128),
        ]
    )
    with torch.no_grad():
        alone = quantized(small)
        beside = quantized(torch.cat([others[:3], small, others[3:]]))
        each = torch.cat([quantized(row[None]) for row in others])
        expected = linear(torch.cat([small, others]))
    assert torch.equal(beside[3:4], alone)
    assert torch.equal(torch.cat([beside[:3], beside[4:]]), each)
    for got, want in zip(torch.cat([alone, each])[:-1], expected[:-1], strict=True):
        assert relative_error(got, want) < 0.05  # the zero row: checked exactly below
    # The constant rows (no spread to round) come out as their exact products with the int8
    # weights, the zero row as exactly its bias.
    exact = torch.nn.functional.linear(others[-2:], quantized.dequantized(), linear.bias)
    assert torch.allclose(each[-2:], exact, rtol=1e-5, atol=1e-5)
    zero = torch.zeros(64) if linear.bias is None else linear.bias.detach()
    assert torch.equal(each[-1], zero)


def test_the_weights_are_int8s_values_and_counted() -> None:
    """The packed weights are the per-row int8 weights ``Int8Linear`` is made from (with float32
    scales), and ``weight_bytes`` counts them although they are not a buffer: a quarter of
    float32's."""
    torch.manual_seed(2)
    linear = torch.nn.Linear(192, 96, bias=True)
    quantized = W8A8Linear(linear)
    qweight, scales = quantize_weight(linear.weight)
    expected = qweight.float() * scales[:, None]
    assert torch.allclose(quantized.dequantized(torch.float32), expected, rtol=1e-6, atol=0)
    float_bytes = weight_bytes(linear)
    assert 0.25 * float_bytes < weight_bytes(quantized) < 0.3 * float_bytes


def test_prefill_chunks_multiply_densely_where_the_cpu_has_bf16(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a CPU with native bf16 a chunk of ``DENSE_ROWS`` rows or more is a dense bf16
    product with the same int8 weights (as ``Int8Linear`` does); elsewhere every row count goes
    through fbgemm."""
    torch.manual_seed(3)
    linear = torch.nn.Linear(128, 96, bias=True)
    quantized = W8A8Linear(linear)
    weight = quantized.dequantized(torch.float32)
    x = activations(DENSE_ROWS, 128)
    exact = torch.nn.functional.linear(x, weight, linear.bias)
    monkeypatch.setattr(w8a8, "dense_dtype", lambda: torch.bfloat16)
    with torch.no_grad():
        dense = quantized(x)
    assert relative_error(dense, exact) < 0.01
    monkeypatch.setattr(w8a8, "dense_dtype", lambda: torch.float32)
    with torch.no_grad():
        integer = quantized(x)
    assert 0.001 < relative_error(integer, exact) < 0.05  # fbgemm's rounding, not bf16's


def test_quantize_linears_w8a8_swaps_every_linear_and_refuses_other_devices() -> None:
    """Every linear layer becomes W8A8 but an MLP's down projection, which stays weight-only."""
    block = torch.nn.Module()
    block.gate_up_proj = torch.nn.Linear(64, 64)
    block.down_proj = torch.nn.Linear(32, 64)
    block.inner = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU())
    assert quantize_linears_w8a8(block) == 3
    assert not any(isinstance(m, torch.nn.Linear) for m in block.modules())
    assert isinstance(block.gate_up_proj, W8A8Linear) and isinstance(block.inner[0], W8A8Linear)
    assert isinstance(block.down_proj, Int8Linear)
    with pytest.raises(ValueError, match="CPU only"):
        W8A8Linear(torch.nn.Linear(64, 32, device="meta"))


def test_another_quantized_engine_is_refused() -> None:
    """QNNPACK (ARM's default) and oneDNN round activations otherwise: a clear error, not
    different numbers."""
    if "qnnpack" not in torch.backends.quantized.supported_engines:
        pytest.skip("this PyTorch has no QNNPACK engine to switch to")
    engine = torch.backends.quantized.engine
    torch.backends.quantized.engine = "qnnpack"
    try:
        with pytest.raises(ValueError, match="x86 quantized engine"):
            W8A8Linear(torch.nn.Linear(64, 32))
    finally:
        torch.backends.quantized.engine = engine


def test_the_engine_config_takes_w8a8() -> None:
    """(The settings' ``RAGGUARD_QUANTIZATION=w8a8``: tests/rag/test_pipeline.py.)"""
    assert EngineConfig(quantization="w8a8").quantization == "w8a8"


@pytest.fixture(scope="module")
def w8a8_engine() -> LLMEngine:
    return LLMEngine(
        EngineConfig(device="cpu", quantization="w8a8", kv_cache_memory_bytes=64 << 20)
    )


@pytest.mark.model
def test_the_w8a8_engine_mostly_agrees_with_the_float_one_on_the_next_token(
    w8a8_engine: LLMEngine, llm_engine: LLMEngine
) -> None:
    """SmolLM2-135M in W8A8: the decoder's layers but the down projections in W8A8, the LM head
    int8 weight-only. 7-bit activations move more than int8 weights do, and near-ties flip: the
    next token's distribution is checked as well as the token. Task accuracy is the benchmark's
    to measure (docs/benchmarks.md)."""
    assert isinstance(w8a8_engine.model.lm_head, Int8Linear)
    layer = w8a8_engine.model.model.layers[0]
    assert isinstance(layer.self_attn.qkv_proj, W8A8Linear)
    assert isinstance(layer.mlp.gate_up_proj, W8A8Linear)
    assert isinstance(layer.mlp.down_proj, Int8Linear)
    assert weight_bytes(w8a8_engine.model) < 0.26 * weight_bytes(llm_engine.model)
    # Mean |log p| change of the tokens both top-20 lists hold: 0.32 nats with each row rounded
    # on its own range, 0.49 when a prompt's rows shared the chunk's range.
    same, moved, prompts = next_token_agreement(llm_engine, w8a8_engine)
    text = w8a8_engine.generate(prompts[:1], SamplingParams(max_tokens=24))[0].outputs[0].text
    assert same >= 0.7 * len(prompts), same
    assert sum(moved) / len(moved) < 0.4, moved
    assert len(text.split()) >= 5


def test_the_state_dict_holds_the_int8_weights_and_loading_repacks_them() -> None:
    """The packed weights are no buffer, yet a state dict carries them (int8 rows and their
    scales, under Int8Linear's names) and loading one into another layer gives its products."""
    torch.manual_seed(5)
    source = W8A8Linear(torch.nn.Linear(64, 48, bias=True))
    state = source.state_dict()
    assert set(state) == {"bias", "qweight", "scales"}
    assert state["qweight"].dtype == torch.int8 and state["scales"].shape == (48,)
    target = W8A8Linear(torch.nn.Linear(64, 48, bias=True))
    x = activations(3, 64)
    with torch.no_grad():
        assert not torch.equal(target(x), source(x))
        target.load_state_dict(state)
        assert torch.equal(target(x), source(x))
    # An Int8Linear of other weights loads the same state dict (the names are shared) and then
    # stands for the same weights.
    int8 = Int8Linear.from_linear(torch.nn.Linear(64, 48, bias=True))
    assert not torch.equal(int8.qweight, state["qweight"])
    int8.load_state_dict(state)
    assert torch.equal(int8.qweight, state["qweight"])
    assert torch.allclose(
        int8.dequantized(torch.float32), source.dequantized(torch.float32), rtol=1e-2
    )

    missing = target.load_state_dict({"bias": state["bias"]}, strict=False)
    assert set(missing.missing_keys) == {"qweight", "scales"}
    with pytest.raises(RuntimeError, match="need int8"):
        target.load_state_dict({**state, "qweight": state["qweight"].float()})


def test_moving_a_w8a8_layer_off_the_cpu_is_refused_and_a_dtype_change_is_followed() -> None:
    layer = W8A8Linear(torch.nn.Linear(32, 16, bias=True))
    with pytest.raises(ValueError, match="CPU only"):
        layer.to("meta")
    layer.to(torch.bfloat16)
    assert layer.out_dtype == torch.bfloat16 and layer.bias is not None
    assert layer.bias.dtype == torch.bfloat16
    with torch.no_grad():
        assert layer(torch.randn(2, 32, dtype=torch.bfloat16)).dtype == torch.bfloat16
