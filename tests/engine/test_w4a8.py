"""W4A8: our CPU kernel (4-bit weights, and int8 rows for the LM head, times activations rounded
to 8 bits in blocks of 32) against exact references, and the W4A8 engine on the real model.

The kernel is compiled on first use; on a CPU without AVX2 the format is refused and these tests
skip, saying so. On an AVX2 CPU a failed build is a failure, not a skip.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.layers import cpu_kernels
from engine.layers.int4 import dequantize_int4, quantize_int4
from engine.layers.quantization import DENSE_ROWS, Int8Embedding, dense_dtype, weight_bytes
from engine.layers.w4a8 import BlockInt8Linear, W4A8Linear, quantize_linears_w4a8
from tests.engine.test_quantization import next_token_agreement

pytestmark = pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"),
    reason="the w4a8 kernels need an x86 CPU with AVX2",
)


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return float((got - expected).detach().norm() / expected.detach().norm())


def activations(rows: int, width: int) -> torch.Tensor:
    """Rows shaped like a model's: most channels small, a few several times larger."""
    x = torch.randn(rows, width)
    x[:, ::37] *= 4
    return x


def test_activations_are_rounded_per_block_of_32() -> None:
    """Each block of 32 gets its own scale (largest magnitude onto 127): an outlier coarsens
    its own block only, and a block of zeros stays zeros."""
    x = torch.randn(2, 96)
    x[0, 5] = 1000.0  # in row 0's first block
    x[1, 32:64] = 0.0
    rounded = cpu_kernels.quantize_activations(x)
    steps = x.abs().reshape(2, 3, 32).amax(dim=-1) / 127
    error = (rounded - x).abs().reshape(2, 3, 32).amax(dim=-1)
    assert torch.all(error <= steps / 2 + 1e-6)
    assert steps[0, 0] > 1 and steps[0, 1] < 0.05  # the outlier's block only
    assert torch.equal(rounded[1, 32:64], torch.zeros(32))


@pytest.mark.parametrize("shape", [(64, 96), (60, 32), (8, 576)])
def test_packing_keeps_int4s_codes_with_float16_scales(shape: tuple[int, int]) -> None:
    """The kernel's records stand for int4's weights (same groups of 32, same codes), up to the
    float16 rounding of each group's scale and offset; 60 rows are padded to 64 and cut."""
    torch.manual_seed(1)
    linear = torch.nn.Linear(shape[1], shape[0], bias=False)
    layer = W4A8Linear(linear)
    q, scales, zeros = quantize_int4(linear.weight, 32)
    int4_weight = dequantize_int4(q, scales, zeros, 32)
    got = layer.dequantized(torch.float32)
    assert got.shape == shape
    assert relative_error(got, int4_weight) < 2e-3
    assert relative_error(got, linear.weight) < 0.1  # 4 bits


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 9])
@pytest.mark.parametrize("bias", [False, True])
def test_the_kernel_computes_the_product_of_its_rounded_operands(rows: int, bias: bool) -> None:
    """Against float32 arithmetic on exactly what the kernel multiplies (its rounded activations,
    its weights): equal to float rounding, for every tile of activation rows (1-4 share a pass)
    and a layer whose height (60) is no multiple of the 8 rows the kernel interleaves."""
    torch.manual_seed(rows)
    linear = torch.nn.Linear(320, 60, bias=bias)
    layer = W4A8Linear(linear)
    x = activations(rows, 320)
    with torch.no_grad():
        expected = F.linear(cpu_kernels.quantize_activations(x), layer.dequantized(), linear.bias)
        got = layer(x)
        assert got.shape == (rows, 60) and got.dtype == torch.float32
        assert relative_error(got, expected) < 1e-5
        assert relative_error(got, linear(x)) < 0.1  # 4-bit weights, 8-bit activations
        # A row's product does not depend on what shares its call.
        assert torch.equal(layer(x[-1:]), got[-1:])


def test_a_prefill_chunk_multiplies_the_widened_weights_densely() -> None:
    """From DENSE_ROWS rows on, the weights are widened (to ``dense_dtype()``: bf16 where the
    CPU multiplies it natively, else float32) and multiplied densely, the rule every format
    here follows, so the activations are not rounded to 8 bits."""
    torch.manual_seed(2)
    linear = torch.nn.Linear(128, 64)
    layer = W4A8Linear(linear)
    x = activations(DENSE_ROWS, 128)
    dtype = dense_dtype()
    with torch.no_grad():
        expected = F.linear(x.to(dtype), layer.dequantized(dtype)).float() + linear.bias
        assert torch.equal(layer(x), expected)


def test_the_block_int8_head_matches_its_rows_times_rounded_activations() -> None:
    """The LM head under w4a8: Int8Linear's rows and per-row scales, activations in 8-bit
    blocks, at one row and at many (its rows are sequences: no dense switch)."""
    torch.manual_seed(3)
    linear = torch.nn.Linear(192, 40, bias=False)
    head = BlockInt8Linear.from_linear(linear)
    head.dense_prefill = False
    for rows in (1, 7, DENSE_ROWS + 3):
        x = activations(rows, 192)
        with torch.no_grad():
            expected = cpu_kernels.quantize_activations(x) @ head.dequantized(torch.float32).T
            assert relative_error(head(x), expected) < 1e-5
    # Its rows still serve a tied embedding.
    table = Int8Embedding.tied_to(head)
    assert table.qweight is head.qweight


def test_bad_shapes_and_inputs_are_refused_clearly() -> None:
    with pytest.raises(ValueError, match="divisible by 32"):
        W4A8Linear(torch.nn.Linear(40, 16))
    layer = W4A8Linear(torch.nn.Linear(64, 16))
    with pytest.raises(RuntimeError, match="columns"):
        cpu_kernels.w4a8_linear(torch.randn(2, 32), layer.records)
    with pytest.raises(RuntimeError, match="float32"):
        cpu_kernels.w4a8_linear(torch.randn(2, 64).double(), layer.records)
    with pytest.raises(RuntimeError, match="records"):
        cpu_kernels.w4a8_linear(torch.randn(2, 64), layer.records[:, :, :100].contiguous())
    with pytest.raises(RuntimeError, match="multiples of 8"):
        cpu_kernels.w4_pack(
            torch.zeros(4, 32, dtype=torch.uint8), torch.ones(4, 1), torch.ones(4, 1)
        )
    with pytest.raises(ValueError, match="CPU only"):
        layer.to("meta")


def test_the_state_dict_round_trips_the_records() -> None:
    torch.manual_seed(4)
    source = W4A8Linear(torch.nn.Linear(64, 24, bias=True))
    target = W4A8Linear(torch.nn.Linear(64, 24, bias=True))
    x = activations(2, 64)
    with torch.no_grad():
        assert not torch.equal(target(x), source(x))
        target.load_state_dict(source.state_dict())
        assert torch.equal(target(x), source(x))


def test_quantize_linears_w4a8_swaps_every_linear() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    assert quantize_linears_w4a8(model) == 2
    assert all(isinstance(model[i], W4A8Linear) for i in (0, 2))


@pytest.fixture(scope="module")
def w4a8_engine() -> LLMEngine:
    return LLMEngine(
        EngineConfig(device="cpu", quantization="w4a8", kv_cache_memory_bytes=64 << 20)
    )


@pytest.mark.model
def test_the_w4a8_engine_mostly_agrees_with_the_float_one_on_the_next_token(
    w4a8_engine: LLMEngine, llm_engine: LLMEngine
) -> None:
    """SmolLM2-135M in W4A8: every decoder product through the kernel (its Q4_1 blocks keep
    their codes), the LM head int8 rows through its 8-bit form. The next token and its
    distribution stay close to float32's; task accuracy is the benchmark's to measure."""
    model = w4a8_engine.model
    assert isinstance(model.lm_head, BlockInt8Linear)
    layer = model.model.layers[0]
    for product in (layer.self_attn.qkv_proj, layer.mlp.gate_up_proj, layer.mlp.down_proj):
        assert isinstance(product, W4A8Linear)
    assert weight_bytes(model) < 0.25 * weight_bytes(llm_engine.model)
    same, moved, prompts = next_token_agreement(llm_engine, w4a8_engine)
    assert same >= 0.7 * len(prompts), same
    assert sum(moved) / len(moved) < 0.4, moved


@pytest.mark.model
def test_w4a8_greedy_tokens_do_not_depend_on_the_batch(w4a8_engine: LLMEngine) -> None:
    """Each row is rounded on its own and multiplied alone, so a sequence's greedy tokens are
    the same decoded alone or beside others (steps stay under DENSE_ROWS rows here)."""
    prompts = ["The capital of France is", "Two plus two is", "Water boils at"]
    params = SamplingParams(max_tokens=12, ignore_eos=True)
    together = [o.outputs[0].token_ids for o in w4a8_engine.generate(prompts, params)]
    alone = [w4a8_engine.generate([p], params)[0].outputs[0].token_ids for p in prompts]
    assert together == alone
    assert len(w4a8_engine.generate(prompts[:1], params)[0].outputs[0].text.split()) >= 3


def test_the_engine_config_takes_w4a8() -> None:
    assert EngineConfig(quantization="w4a8").quantization == "w4a8"
