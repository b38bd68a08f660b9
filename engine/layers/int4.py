"""int4 weight-only quantization: weights in 4 bits, in groups along the input dimension, each
group with its own float scale and offset (asymmetric), multiplied by PyTorch's CPU kernel
``torch.ops.aten._weight_int4pack_mm_for_cpu`` without ever widening them to float.

The layout is the one that kernel takes: 4-bit values ``q`` in 0..15 packed two to a byte, and
per group the pair ``(scale, zero)`` with ``w ≈ (q - 8) * scale + zero``. Groups are 32 input
columns: GGUF's 4-bit formats (Q4_0, Q4_1, and Q4_K's sub-blocks) scale their weights in blocks
of 32 along the same dimension, so a block that spans its 16 levels comes back with its own codes
and only the bf16 rounding of its scale and offset is new. Groups of 64 re-quantize two GGUF
blocks onto one grid: SmolLM2's int4 answers then kept 17 % of float32's first 32 greedy tokens
on the parity prompts, against 75 % with groups of 32, at the same speed (docs/benchmarks.md).
Decoding reads every weight once per token, so at an eighth of fp32's bytes (plus a scale and a
zero per group) the decoder's linear layers cost the least memory traffic of any format here.
CPU only: PyTorch's CUDA int4 kernel takes another packing, not implemented here.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from engine.layers.quantization import (
    DENSE_ROWS,
    QUANTIZE_ROWS,
    compute_dtype,
    dense_dtype,
    replace_linears,
)

GROUP_SIZE = 32
"""Input columns per (scale, zero) pair: GGUF's block size."""


def group_size_for(in_features: int) -> int:
    if in_features % GROUP_SIZE:
        raise ValueError(f"int4 needs an input width divisible by {GROUP_SIZE}, got {in_features}")
    return GROUP_SIZE


def quantize_int4(
    weight: torch.Tensor, group_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(q, scales, zeros)``: ``q`` int32 in 0..15 of the weight's shape, and per output row
    and group a scale and a zero, with ``w ≈ (q - 8) * scale + zero`` (each group's range
    mapped onto the 16 levels)."""
    out_features, in_features = weight.shape
    w = weight.detach().float().reshape(out_features, in_features // group_size, group_size)
    low, high = w.amin(dim=-1), w.amax(dim=-1)
    scales = ((high - low) / 15).clamp(min=torch.finfo(torch.float32).tiny)
    q = torch.round((w - low[..., None]) / scales[..., None]).clamp_(0, 15).to(torch.int32)
    zeros = low + scales * 8
    return q.reshape(out_features, in_features), scales, zeros


PACK_ROWS_CANDIDATES = (64, 32)
"""Output rows the CPU kernel may pack together: for each input column, byte ``d`` of a block
holds row ``d``'s code in its low nibble and row ``d + rows / 2``'s in its high one. 64 is what
the AVX-512 build does (checked here); 32 is tried for narrower builds, unverified; a build that
packs otherwise is left to its kernel for every product."""


def unpack_int4(
    packed: torch.Tensor, out_features: int, in_features: int, dtype: torch.dtype, rows: int
) -> torch.Tensor:
    """The ``q`` codes (``[out, in]``, in ``dtype``) a ``_convert_weight_to_int4pack_for_cpu``
    result holds, read as blocks of ``rows`` output rows (``kernel_pack_rows`` finds ``rows``)."""
    blocks = packed.view(out_features // rows, in_features, rows // 2)
    codes = torch.empty(out_features // rows, rows, in_features, dtype=dtype)
    codes[:, : rows // 2].copy_((blocks & 0xF).transpose(1, 2))
    codes[:, rows // 2 :].copy_((blocks >> 4).transpose(1, 2))
    return codes.view(out_features, in_features)


@functools.cache
def kernel_pack_rows() -> int | None:
    """The block of output rows this PyTorch build packs int4 weights in, if it is one
    ``unpack_int4`` reads (the layout is the kernel's own business): found once, on a pattern."""
    pattern = torch.Generator().manual_seed(0)
    q = torch.randint(0, 16, (128, 64), dtype=torch.int32, generator=pattern)
    try:
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    except RuntimeError:
        return None
    for rows in PACK_ROWS_CANDIDATES:
        if torch.equal(unpack_int4(packed, 128, 64, torch.int32, rows), q):
            return rows
    return None


def dequantize_int4(
    q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group_size: int
) -> torch.Tensor:
    """The float weight ``q``, ``scales`` and ``zeros`` stand for (tests, checks)."""
    out_features, in_features = q.shape
    grouped = q.reshape(out_features, in_features // group_size, group_size).float() - 8
    return (grouped * scales[..., None] + zeros[..., None]).reshape(out_features, in_features)


class Int4Linear(nn.Module):
    """``nn.Linear`` with int4 grouped weights, multiplied by PyTorch's CPU int4 kernel."""

    packed: torch.Tensor
    scales_and_zeros: torch.Tensor

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight = linear.weight
        if weight.device.type != "cpu":
            raise ValueError("int4 weights run on the CPU only (use int8 on CUDA)")
        self.out_features, self.in_features = weight.shape
        self.group_size = group_size_for(self.in_features)
        self.out_dtype = weight.dtype
        # The kernel is many times slower with fp32 activations: those run in bf16.
        self.compute_dtype = compute_dtype(weight.dtype, weight.device)
        q, scales, zeros = quantize_int4(weight, self.group_size)
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
        # [groups, out_features, 2]: the kernel's layout of each group's (scale, zero).
        pairs = torch.stack([scales, zeros], dim=-1).transpose(0, 1).contiguous()
        self.register_buffer("packed", packed)
        # The packing's row blocks, where this build's layout is known and they tile the layer:
        # only then can a prefill chunk read the weight back (``dequantized``).
        rows = kernel_pack_rows()
        self.pack_rows = rows if rows is not None and self.out_features % rows == 0 else None
        self.register_buffer("scales_and_zeros", pairs.to(self.compute_dtype))
        self.bias = (
            None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, self.in_features)
        if flat.shape[0] >= DENSE_ROWS and self.pack_rows is not None:
            # a prefill chunk: as for int8 (engine.layers.quantization.DENSE_ROWS), widening the
            # weight and a float product beat the kernel, whose cost grows with every row
            dtype = dense_dtype()
            y = F.linear(flat.to(dtype), self.dequantized(dtype)).to(self.out_dtype)
        else:
            flat = flat.to(self.compute_dtype).contiguous()
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(
                flat, self.packed, self.group_size, self.scales_and_zeros
            ).to(self.out_dtype)
        if self.bias is not None:
            y = y + self.bias
        return y.view(*shape[:-1], self.out_features)

    def dequantized(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The weight the packed codes and their groups' scales and zeros stand for, in
        ``dtype`` (default: the layer's own; built per call, dropped after)."""
        dtype = dtype or self.out_dtype
        if self.pack_rows is None:
            raise ValueError("this PyTorch build packs int4 weights in a layout we cannot read")
        weight = unpack_int4(
            self.packed, self.out_features, self.in_features, dtype, self.pack_rows
        )
        grouped = weight.view(self.out_features, -1, self.group_size)
        pairs = self.scales_and_zeros.to(dtype).transpose(0, 1)  # [out, groups, 2]
        grouped.sub_(8).mul_(pairs[..., :1]).add_(pairs[..., 1:])
        return weight

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"int4 (groups of {self.group_size})"
        )


class Int4Embedding(nn.Module):
    """A token embedding kept in 4 bits: per row, groups of 32 codes packed two to a byte with a
    scale and an offset each (as ``Int4Linear``'s weights, but in a layout of our own, since a
    lookup reads whole rows rather than multiplying). Only the rows looked up are widened."""

    packed: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor

    def __init__(self, embedding: nn.Embedding) -> None:
        super().__init__()
        weight = embedding.weight
        self.num_embeddings, self.embedding_dim = weight.shape
        self.group_size = group_size_for(self.embedding_dim)
        self.out_dtype = weight.dtype
        groups = self.embedding_dim // self.group_size
        device = weight.device
        packed = torch.empty(
            self.num_embeddings, self.embedding_dim // 2, dtype=torch.uint8, device=device
        )
        scales = torch.empty(self.num_embeddings, groups, dtype=torch.bfloat16, device=device)
        zeros = torch.empty_like(scales)
        # A block of rows at a time: a vocabulary-sized table's int32 codes would be twice the
        # float table again (each row is quantized on its own, so the result is the same).
        for start in range(0, self.num_embeddings, QUANTIZE_ROWS):
            block = slice(start, start + QUANTIZE_ROWS)
            q, scale, zero = quantize_int4(weight[block], self.group_size)
            codes = q.to(torch.uint8)
            packed[block] = codes[:, 0::2] | (codes[:, 1::2] << 4)
            scales[block], zeros[block] = scale, zero
        self.register_buffer("packed", packed)
        self.register_buffer("scales", scales)
        self.register_buffer("zeros", zeros)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        packed = self.packed[ids]
        codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).flatten(-2)
        groups = codes.unflatten(-1, (-1, self.group_size)).to(torch.float32) - 8
        rows = groups * self.scales[ids, :, None].float() + self.zeros[ids, :, None].float()
        return rows.flatten(-2).to(self.out_dtype)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, int4 (groups of {self.group_size})"


def quantize_linears_int4(module: nn.Module) -> int:
    """Replace every ``nn.Linear`` below ``module`` by an ``Int4Linear``; returns the count."""
    return replace_linears(module, lambda _, linear: Int4Linear(linear))
