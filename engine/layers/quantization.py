"""int8 weight-only quantization: per-output-channel symmetric int8 weights with float scales.

Decoding one sequence reads every weight once per token, so on a CPU (and for small batches on
a GPU) its speed is set by the bytes of the weights. ``Int8Linear`` keeps a quarter of fp32's
bytes and multiplies with PyTorch's own weight-only kernel, ``torch._weight_int8pack_mm``
(on CPU with activations in bf16 or fp16: the kernel is many times slower with fp32
activations, so those are cast to bf16 for the product and back; on CUDA in fp32, the one dtype
PyTorch's CUDA kernel takes). With tied embeddings the LM head
and the token embedding share one int8 table: an embedding row is a row of the LM head, and a
per-row scale serves both. An untied embedding gets an int8 table of its own (Qwen2.5-1.5B's
GGUF has a separate output matrix: its float32 embedding would be 890 MiB of the model).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Protocol, Self, runtime_checkable

import torch
import torch.nn.functional as F
from torch import nn

QMAX = 127
DENSE_ROWS = 64
"""From this many rows in one step (a prefill chunk, or that many sequences and chunks at once)
an ``Int8Linear`` on the CPU widens its weight
(to ``dense_dtype()``) and multiplies densely: PyTorch's int8 kernel costs about the same per row
at any row count, so at 128-512 rows it took 2-2.5x the time of widening plus a float32 product
on this CPU's shapes, while below ~32 rows (decode, verification) it is the faster one."""


@functools.cache
def dense_dtype() -> torch.dtype:
    """The dtype a prefill chunk's widened product runs in: bf16 where the CPU multiplies bf16
    natively (AMX or AVX-512 BF16: oneDNN ran a 600 x 1536 x 8960 product in 8.1 ms in bf16
    against 52.9 ms in float32 on the 2-core Xeon), else float32. bf16 is also the activation
    dtype the weight-only kernels take, so decode and prefill round alike."""
    cpu = torch.cpu
    native = getattr(cpu, "_is_amx_tile_supported", None)
    avx512_bf16 = getattr(cpu, "_is_avx512_bf16_supported", None)
    fast = bool(native and native()) or bool(avx512_bf16 and avx512_bf16())
    return torch.bfloat16 if fast else torch.float32


QUANTIZE_ROWS = 8192
"""Rows quantized at a time: each row is quantized on its own, so the float temporaries stay a
block's size (a vocabulary-sized table would otherwise need two float copies of itself)."""


def quantize_weight(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 weight, float32 scale per output row) with ``weight ≈ qweight * scale[:, None]``."""
    rows = weight.shape[0]
    qweight = torch.empty(weight.shape, dtype=torch.int8, device=weight.device)
    scales = torch.empty(rows, dtype=torch.float32, device=weight.device)
    for start in range(0, rows, QUANTIZE_ROWS):
        block = slice(start, start + QUANTIZE_ROWS)
        w = weight[block].detach().float()
        scale = (w.abs().amax(dim=1) / QMAX).clamp(min=torch.finfo(torch.float32).tiny)
        qweight[block] = torch.round(w / scale[:, None]).clamp_(-QMAX, QMAX)
        scales[block] = scale
    return qweight, scales


def compute_dtype(dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The activation dtype the int8 kernel runs in for a model of ``dtype`` on ``device``: the
    CPU kernel is fast in bf16 and fp16 (fp32 activations are cast to bf16); the CUDA kernel
    PyTorch ships takes fp32 activations."""
    if device.type == "cuda":
        return torch.float32
    return dtype if dtype in (torch.bfloat16, torch.float16) else torch.bfloat16


class Int8Linear(nn.Module):
    """``nn.Linear`` with int8 weights: ``y = (x @ qweight.T) * scales + bias``."""

    qweight: torch.Tensor
    scales: torch.Tensor

    def __init__(
        self,
        qweight: torch.Tensor,
        scales: torch.Tensor,
        bias: torch.Tensor | None,
        out_dtype: torch.dtype,
    ) -> None:
        super().__init__()
        if qweight.dtype != torch.int8 or qweight.dim() != 2:
            raise ValueError(f"qweight must be a 2-d int8 tensor, got {qweight.dtype}")
        if scales.shape != (qweight.shape[0],):
            raise ValueError(f"need one scale per output row: {tuple(scales.shape)}")
        self.out_features, self.in_features = qweight.shape
        self.out_dtype = out_dtype
        self.compute_dtype = compute_dtype(out_dtype, qweight.device)
        self.register_buffer("qweight", qweight.contiguous())
        self.register_buffer("scales", scales.to(self.compute_dtype))
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)
        # The LM head turns this off: its rows are sequences, not prompt tokens, and widening
        # the largest matrix (Qwen's 151936 x 1536) for a step of many sequences costs more
        # than the kernel.
        self.dense_prefill = True

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Self:
        qweight, scales = quantize_weight(linear.weight)
        return cls(qweight, scales, linear.bias, linear.weight.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, self.in_features)
        if self.dense_prefill and flat.shape[0] >= DENSE_ROWS and flat.device.type == "cpu":
            dtype = dense_dtype()
            y = F.linear(flat.to(dtype), self.dequantized(dtype)).to(self.out_dtype)
        else:
            flat = flat.to(self.compute_dtype)
            y = torch._weight_int8pack_mm(flat, self.qweight, self.scales).to(self.out_dtype)
        if self.bias is not None:
            y += self.bias
        return y.view(*shape[:-1], self.out_features)

    def dequantized(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The weight the int8 rows and their scales stand for, in ``dtype`` (default: the
        layer's own; built per call, dropped after: the model keeps no float copy)."""
        dtype = dtype or self.out_dtype
        return self.qweight.to(dtype).mul_(self.scales.to(dtype)[:, None])

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


class Int8Embedding(nn.Module):
    """A token embedding read from int8 rows with one scale per row: the LM head's own table
    when the weights are tied (``tied_to``), else a table of its own (``from_embedding``)."""

    qweight: torch.Tensor
    scales: torch.Tensor

    def __init__(self, qweight: torch.Tensor, scales: torch.Tensor, out_dtype: torch.dtype) -> None:
        super().__init__()
        if qweight.dtype != torch.int8 or scales.shape != (qweight.shape[0],):
            raise ValueError("need a 2-d int8 table and one scale per row")
        self.out_dtype = out_dtype
        # Tied: the very tensors of the head, so the table is held (and counted) once.
        self.register_buffer("qweight", qweight)
        self.register_buffer("scales", scales)

    @classmethod
    def tied_to(cls, head: Int8Linear) -> Int8Embedding:
        return cls(head.qweight, head.scales, head.out_dtype)

    @classmethod
    def from_embedding(cls, embedding: nn.Embedding) -> Int8Embedding:
        qweight, scales = quantize_weight(embedding.weight)
        return cls(qweight, scales, embedding.weight.dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = F.embedding(ids, self.qweight).to(self.out_dtype)
        return rows * self.scales[ids, None].to(self.out_dtype)


def replace_linears(module: nn.Module, make: Callable[[str, nn.Linear], nn.Module]) -> int:
    """Replace every ``nn.Linear`` below ``module`` by ``make(its attribute name, it)``; returns
    the count (the walk each weight format's ``quantize_linears*`` shares)."""
    count = 0
    for name, child in list(module.named_children()):
        if isinstance(child, nn.Linear):
            setattr(module, name, make(name, child))
            count += 1
        else:
            count += replace_linears(child, make)
    return count


def quantize_linears(module: nn.Module) -> int:
    """Replace every ``nn.Linear`` below ``module`` by an ``Int8Linear``; returns the count."""
    return replace_linears(module, lambda _, linear: Int8Linear.from_linear(linear))


@runtime_checkable
class PackedWeights(Protocol):
    """A layer holding weights in a form that is neither a parameter nor a buffer."""

    def packed_bytes(self) -> int: ...


def weight_bytes(module: nn.Module) -> int:
    """Bytes of a module's parameters and buffers (each shared tensor once), and of the packed
    weights a module holds outside them (``packed_bytes``: ``W8A8Linear``)."""
    seen: set[int] = set()
    total = sum(m.packed_bytes() for m in module.modules() if isinstance(m, PackedWeights))
    for tensor in list(module.parameters()) + list(module.buffers()):
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        total += tensor.numel() * tensor.element_size()
    return total
