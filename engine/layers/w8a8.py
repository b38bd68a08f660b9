"""int8 weights times int8 activations (W8A8): the activations are quantized per token at run time
and multiplied with the weights in 8-bit integers by fbgemm, PyTorch's x86 quantized engine
(``quantized::linear_dynamic``).

The weight-only kernels (``Int8Linear``, ``Int4Linear``) widen each weight to bf16 inside the
product; on a CPU without bf16 arithmetic (AVX2 only) that widening, not the memory, sets their
speed, and a step of several rows costs several times one row. fbgemm multiplies bytes with the
CPU's integer dot products instead, as llama.cpp does with its 8-bit activation blocks. On the
2-core AMD EPYC (AVX2), with random int8 weights of Qwen2.5-Coder-1.5B's shapes (28 layers), the
decoder's products took 64 ms for one row against 95 ms weight-only, 98 against 324 ms for 8
rows, and a 256-row prefill chunk 2.5 s against 7.3 s widened to float32; the engine's figures
are in docs/benchmarks.md, "Integer products (w8a8)".

The price is the activations' precision. The op takes one scale and offset for its whole input,
so each row (a token) is first mapped onto exactly [-1, 1] by its own minimum and maximum, and
the product is mapped back: ``x @ W.T = s * (x' @ W.T) + c * W.sum(1)`` for ``x = s * x' + c``,
the last term from the weights' row sums kept beside them. Every row then spans the op's whole
range, so its rounding is its own: a row's product is bit for bit the same whatever shares its
step (alone, in a batch, in a prefill chunk or a verification pass; on a CPU with native bf16, a
chunk of ``DENSE_ROWS`` rows or more multiplies densely instead), and a row in a batch is
rounded as finely as one alone. (Scaling rows by their largest magnitude only, as before, left
the range to the batch's extremes: in a 629-row prefill chunk of Qwen2.5-Coder-1.5B, a row's
product erred 11-36 % more than the same row alone, and differed from it.) fbgemm also quantizes
activations to 7 bits ("reduce range": with 8, its unsigned-by-signed pair sums overflow 16 bits
and saturate). Rounding the activations then moves a product by about 1-5 % of its norm on that
chunk (layers 2, 14 and 26), 6-14 % for Qwen2.5's MLP down projection, whose inputs are
heavy-tailed; weight-only int8 errs by about 1 %. So that one stays weight-only int8
(``WEIGHT_ONLY``).

Weights are per-output-channel symmetric int8 (``quantize_weight``, the same values as
``Int8Linear``'s), held only in fbgemm's packed form (as many bytes as int8's). CPU only, and
only where PyTorch's quantized engine is fbgemm (``x86``): other engines (QNNPACK on ARM, oneDNN)
round activations differently and are refused.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, Self

import torch
import torch.nn.functional as F
from torch import nn

from engine.layers.quantization import (
    DENSE_ROWS,
    Int8Linear,
    dense_dtype,
    quantize_weight,
    replace_linears,
)

FBGEMM_ENGINES = ("x86", "fbgemm")
"""``torch.backends.quantized.engine`` values whose dynamic linear is fbgemm's."""
_PAST_ONE = 1.0 + 2.0**-16
_TINY = torch.finfo(torch.float32).tiny


def fbgemm_is_the_engine() -> bool:
    """Whether w8a8 can run here: PyTorch's quantized engine is fbgemm (x86). QNNPACK (ARM) and
    oneDNN round activations differently and are refused."""
    return torch.backends.quantized.engine in FBGEMM_ENGINES


def pack_int8_weight(qweight: torch.Tensor, scales: torch.Tensor) -> torch.ScriptObject:
    """fbgemm's packed form of per-row int8 weights (``qweight[i] * scales[i]``)."""
    zero_points = torch.zeros(qweight.shape[0], dtype=torch.long)
    with warnings.catch_warnings():
        # PyTorch marks its quantized tensor type deprecated; it is what the packing op takes.
        warnings.simplefilter("ignore", UserWarning)
        quantized = torch._make_per_channel_quantized_tensor(
            qweight, scales.double(), zero_points, 0
        )
        return torch.ops.quantized.linear_prepack(quantized, None)


class W8A8Linear(nn.Module):
    """``nn.Linear`` with int8 weights in fbgemm's packed form and int8 activations, each row
    quantized with its own scale at every call."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight = linear.weight
        if weight.device.type != "cpu":
            raise ValueError("w8a8 runs on the CPU only (use int8 on CUDA)")
        if not fbgemm_is_the_engine():
            raise ValueError(
                "w8a8 needs PyTorch's x86 quantized engine (fbgemm), not "
                f"{torch.backends.quantized.engine!r} (use int8)"
            )
        self.out_features, self.in_features = weight.shape
        self.out_dtype = weight.dtype
        qweight, scales = quantize_weight(weight)
        try:
            self._pack(qweight, scales)
        except RuntimeError as error:  # a CPU fbgemm does not support
            raise ValueError(f"w8a8 could not pack its weights with fbgemm: {error}") from error
        self.bias = (
            None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)
        )

    def _pack(self, qweight: torch.Tensor, scales: torch.Tensor) -> None:
        self.packed = pack_int8_weight(qweight, scales)
        # Row sums of the weights the int8 rows stand for: what a row's centre contributes.
        # Float32 whatever the model's dtype, and not a buffer (derived from the packed rows).
        self.weight_sums = (qweight.float() * scales.float()[:, None]).sum(dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, self.in_features).float()
        if flat.shape[0] >= DENSE_ROWS and dense_dtype() == torch.bfloat16:
            # A prefill chunk on a CPU that multiplies bf16 natively: dense bf16 is faster there
            # (the rule Int8Linear follows) and keeps the activations' precision.
            dtype = torch.bfloat16
            y = F.linear(flat.to(dtype), self.dequantized(dtype)).float()
        else:
            # Each row onto exactly [-1, 1]: a hair past it, then clamped, so that rounding in
            # the division cannot leave a row's extremes short of the op's range. (In place where
            # it can: at one row the small operators' dispatch costs as much as their work.)
            # A row without spread (constant, or all zeros) takes its value as its centre before
            # the spread is kept from zero, so it maps onto exactly 0 and its product is exact.
            low, high = torch.aminmax(flat, dim=-1, keepdim=True)
            half_range = (high - low).mul_(0.5)
            centre = high.sub_(half_range)
            half_range.clamp_(min=_TINY)
            unit = (flat - centre).div_(half_range).mul_(_PAST_ONE).clamp_(-1.0, 1.0)
            y = torch.ops.quantized.linear_dynamic(unit, self.packed, True)
            y.mul_(half_range).addcmul_(centre, self.weight_sums)
        if self.bias is not None:
            y += self.bias
        return y.to(self.out_dtype).view(*shape[:-1], self.out_features)

    def int8_weight(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(int8 weight, float32 scale per output row) unpacked from fbgemm's form."""
        quantized, _ = torch.ops.quantized.linear_unpack(self.packed)
        return quantized.int_repr(), quantized.q_per_channel_scales().float()

    def dequantized(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The weight the packed int8 rows stand for, in ``dtype`` (built per call)."""
        qweight, scales = self.int8_weight()
        dtype = dtype or self.out_dtype
        return qweight.to(dtype).mul_(scales.to(dtype)[:, None])

    # The packed weights are neither a parameter nor a buffer, so nn.Module's state dict and
    # ``.to()`` would pass them by: a state dict holds them as ``Int8Linear`` names them
    # (``qweight`` int8, ``scales`` per row) and loading one repacks them; moving to another
    # device is refused rather than leaving them behind.

    def _save_to_state_dict(
        self, destination: dict[str, Any], prefix: str, keep_vars: bool
    ) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        qweight, scales = self.int8_weight()
        destination[prefix + "qweight"] = qweight
        destination[prefix + "scales"] = scales

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        names = (prefix + "qweight", prefix + "scales")
        unexpected_keys[:] = [key for key in unexpected_keys if key not in names]
        absent = [name for name in names if name not in state_dict]
        if absent:
            missing_keys.extend(absent)
            return
        qweight, scales = (state_dict[name] for name in names)
        shape = (self.out_features, self.in_features)
        if qweight.dtype != torch.int8 or tuple(qweight.shape) != shape:
            error_msgs.append(
                f"{names[0]}: need int8 of shape {shape}, got {qweight.dtype} "
                f"{tuple(qweight.shape)}"
            )
        elif tuple(scales.shape) != (self.out_features,):
            error_msgs.append(f"{names[1]}: need {self.out_features} scales")
        else:
            self._pack(qweight.cpu(), scales.cpu())

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> Self:
        probe = fn(torch.zeros(0, dtype=self.out_dtype))
        if probe.device.type != "cpu":
            raise ValueError(f"w8a8 runs on the CPU only: cannot move to {probe.device}")
        if probe.dtype.is_floating_point:  # .to(dtype) / .half(): the output's dtype follows
            self.out_dtype = probe.dtype
        return super()._apply(fn, recurse)

    def packed_bytes(self) -> int:
        """Bytes the packed weights hold (not a buffer, so ``weight_bytes`` asks for them): a byte
        a weight and, per output row, fbgemm's scale, zero point and column offset and our row sum
        (4 bytes each; fbgemm's padding of the packed matrix is not counted)."""
        return self.out_features * (self.in_features + 16)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, w8a8"


WEIGHT_ONLY = frozenset({"down_proj"})
"""Layers left to weight-only int8 (``Int8Linear``): the MLP's down projection, whose inputs
(``silu(gate) * up``) are heavy-tailed, so that one scale per row quantizes most of a row
coarsely: 8.9 % error on Qwen2.5-Coder-1.5B's real activations against 2-3 % for the other
products (rows scaled by their largest magnitude; on their own range, 6-14 % against 1-5 % on a
prefill chunk); with every product in W8A8 the 1.5B lost 2 points of accuracy on SQuAD 2.0
(docs/benchmarks.md). At one row it costs little (67 against 64 ms a token for the 1.5B's
decoder), at 8 rows 155 against 98."""


def quantize_linears_w8a8(module: nn.Module) -> int:
    """Replace every ``nn.Linear`` below ``module`` by a ``W8A8Linear``, or an ``Int8Linear``
    for the layers named in ``WEIGHT_ONLY``; returns the count."""

    def make(name: str, linear: nn.Linear) -> nn.Module:
        return Int8Linear.from_linear(linear) if name in WEIGHT_ONLY else W8A8Linear(linear)

    return replace_linears(module, make)
