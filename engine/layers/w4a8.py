"""4-bit weights times 8-bit activations (W4A8), multiplied in integers by our own CPU kernel
(``engine.layers.cpu_kernels``), as llama.cpp does with its 4-bit blocks and 8-bit activation
blocks.

The weights are int4's (``engine.layers.int4.quantize_int4``): groups of 32 input columns, GGUF's
block size, each with a scale and an offset, so a Q4_1 file's blocks come back with their own
codes. Here the pair is kept in float16 (int4 keeps bf16: float16's finer mantissa suits values
this small) as ``w = q * scale + offset``. At every call each row of activations is rounded to
int8 in blocks of 32 with its own scale, and every block product is a sum of byte products;
PyTorch's int4 kernel (``Int4Linear``) instead widens each weight to bf16, which an AVX2 CPU
cannot multiply natively. Blocks of 32 rather than one scale per row (``W8A8Linear``) keep an
outlier's cost to its own block, so the MLP's down projection, heavy-tailed, runs here too.

The LM head stays in 8 bits (a file's output matrix is usually stored finer than its decoder:
Q6_K in Qwen2.5's Q4_K_M) and multiplies through the same kernel's 8-bit form
(``BlockInt8Linear``). A prefill chunk of ``DENSE_ROWS`` rows or more widens the weights and
multiplies densely, as every format here does. CPU only (x86 with AVX2).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Self

import torch
import torch.nn.functional as F
from torch import nn

from engine.layers import cpu_kernels
from engine.layers.int4 import group_size_for, quantize_int4
from engine.layers.quantization import (
    DENSE_ROWS,
    Int8Linear,
    dense_dtype,
    replace_linears,
)

BLOCK = 32
"""Input columns per weight group and per activation block (the kernel's, GGUF's)."""


def _check_cpu(weight: torch.Tensor) -> None:
    if weight.device.type != "cpu":
        raise ValueError("w4a8 runs on the CPU only (use int8 on CUDA)")
    cpu_kernels.load()


class _StaysOnCpu(nn.Module):
    """Moving the layer off the CPU is refused (the kernel is a CPU one); ``.to(dtype)`` changes
    the dtype of its outputs and bias, never of its packed weights."""

    out_dtype: torch.dtype
    bias: nn.Parameter | None

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> Self:
        probe = fn(torch.zeros(0, dtype=self.out_dtype))
        if probe.device.type != "cpu":
            raise ValueError(f"w4a8 runs on the CPU only: cannot move to {probe.device}")
        if probe.dtype.is_floating_point:
            self.out_dtype = probe.dtype
            if self.bias is not None:
                self.bias = nn.Parameter(fn(self.bias.detach()), requires_grad=False)
        return self


class W4A8Linear(_StaysOnCpu):
    """``nn.Linear`` with 4-bit grouped weights and 8-bit block activations."""

    records: torch.Tensor

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight = linear.weight
        _check_cpu(weight)
        self.out_features, self.in_features = weight.shape
        group_size_for(self.in_features)
        self.out_dtype = weight.dtype
        q, scales, zeros = quantize_int4(weight, BLOCK)
        # int4's (q - 8) * scale + zero, with the constant folded into the offset.
        offsets = zeros - 8 * scales
        # The kernel interleaves rows in groups of ROWS: a layer of other heights gets rows of
        # zeros, whose outputs are dropped.
        padded = -self.out_features % cpu_kernels.ROWS
        if padded:
            q, scales, offsets = (F.pad(t, (0, 0, 0, padded)) for t in (q, scales, offsets))
        self.register_buffer("records", cpu_kernels.w4_pack(q, scales, offsets))
        self.bias = (
            None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, self.in_features)
        if flat.shape[0] >= DENSE_ROWS:
            dtype = dense_dtype()
            y = F.linear(flat.to(dtype), self.dequantized(dtype))
        else:
            y = cpu_kernels.w4a8_linear(flat.float().contiguous(), self.records)
            y = y[:, : self.out_features]
        if self.bias is not None:
            y = y + self.bias
        return y.to(self.out_dtype).view(*shape[:-1], self.out_features)

    def dequantized(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The weight the records stand for, in ``dtype`` (built per call, dropped after)."""
        rows = self.records.shape[0] * cpu_kernels.ROWS
        weight = cpu_kernels.w4_unpack(self.records, rows, self.in_features)
        return weight[: self.out_features].to(dtype or self.out_dtype)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"w4a8 (groups of {BLOCK})"
        )


class BlockInt8Linear(_StaysOnCpu, Int8Linear):
    """``Int8Linear``'s rows (one scale each) multiplied with 8-bit block activations by the
    kernel: the LM head under w4a8. Its rows still serve a tied embedding (``Int8Embedding``)."""

    def __init__(
        self,
        qweight: torch.Tensor,
        scales: torch.Tensor,
        bias: torch.Tensor | None,
        out_dtype: torch.dtype,
    ) -> None:
        _check_cpu(qweight)
        super().__init__(qweight, scales, bias, out_dtype)
        group_size_for(self.in_features)
        # The kernel's row scales: the very values Int8Linear keeps (rounded to its compute
        # dtype), in float32; not a buffer (derived).
        self.row_scales = self.scales.float()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, self.in_features)
        if self.dense_prefill and flat.shape[0] >= DENSE_ROWS:
            return super().forward(x)
        y = cpu_kernels.w8a8_block_linear(flat.float().contiguous(), self.qweight, self.row_scales)
        if self.bias is not None:
            y += self.bias
        return y.to(self.out_dtype).view(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 a8"


def quantize_linears_w4a8(module: nn.Module) -> int:
    """Replace every ``nn.Linear`` below ``module`` by a ``W4A8Linear``; returns the count."""
    return replace_linears(module, lambda _, linear: W4A8Linear(linear))
