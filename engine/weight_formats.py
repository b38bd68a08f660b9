"""The weight format our engine runs a model in when asked for ``quantization="auto"``.

On a GPU: the model's own dtype (the weight-only kernels are CPU-first). On a CPU: int4 where the
file stores every decoder matrix in Q4_1 (SmolLM2's GGUF) and this PyTorch has the CPU int4
kernel. int4's groups are Q4_1's blocks of 32 with a scale and an offset, and a Q4_1 block spans
its 16 levels by construction, so int4 gives it back its own codes: it loses nothing the file had
beyond bf16 rounding, and decodes faster than int8 (docs/benchmarks.md, "The CPU default").
Other 4-bit formats are not given back exactly by a group's minimum and maximum (Q4_0 is
symmetric and seldom reaches code 15, Q4_K's and the IQ formats' grids are optimised or not
linear), a Q4_K_M file also keeps some matrices in 6 bits (Qwen2.5's ``ffn_down`` and ``attn_v``
in half the layers), a Q5_0 one most of them in 5, and a float checkpoint has no 4-bit form to
keep: everything else gets 8-bit weights. Where PyTorch's quantized engine is fbgemm (x86), those
are w8a8 (the activations rounded to 8 bits too, the products in integers); elsewhere int8
weight-only. On Qwen2.5-Coder-1.5B (Q4_K_M, an AVX2 CPU) w8a8 kept task accuracy within 2 points
of float32 on three sets and its confidence ranked answers as well as int8's, at 0.65x int8's
time to first token and 1.2-1.6x its decode rate (docs/benchmarks.md, "Integer products").

A 4-bit file that int4 does not hold exactly (Q4_K_M: Q4_K with some matrices in Q6_K, the
1.5B's) runs w4a8 where our CPU kernel builds (x86 with AVX2, a C++ compiler): its weights are
4-bit already, and w4a8 multiplies them with 8-bit activation blocks in integers. On the 1.5B it
kept task accuracy within 2 points of float32 on three sets and decoded 1.45x as fast as w8a8
at batch 1, as fast as llama.cpp (docs/benchmarks.md, "4-bit products of our own"). A file with
5- or 8-bit matrices (the 0.5B's Q4_K_M holds Q5_0 and Q8_0 ones) keeps 8 bits.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path

import torch

from engine.layers import cpu_kernels
from engine.layers.w8a8 import fbgemm_is_the_engine
from engine.model_loader import ModelSource

EXACT_IN_INT4 = frozenset({"Q4_1"})
"""GGUF tensor types whose blocks int4's groups of 32 hold exactly (up to bf16 rounding)."""


@functools.lru_cache(maxsize=16)
def gguf_decoder_types(path: Path) -> frozenset[str]:
    """The GGUF types of the decoder blocks' weight matrices (``blk.N.*.weight``, 2-d), read
    from the file's tensor table (memory-mapped: no tensor data is read)."""
    from gguf import GGUFReader

    reader = GGUFReader(path)
    return frozenset(
        tensor.tensor_type.name
        for tensor in reader.tensors
        if tensor.name.startswith("blk.")
        and tensor.name.endswith(".weight")
        and len(tensor.shape) == 2
    )


FOUR_BIT = frozenset({"Q4_0", "Q4_1", "Q4_K"})
FOUR_BIT_MIX = FOUR_BIT | {"Q6_K"}
"""A 4-bit file: its decoder matrices in 4-bit types, some perhaps in Q6_K (a Q4_K_M or Q4_K_S
mix), none in 5 or 8 bits."""


def a_four_bit_file(types: Iterable[str]) -> bool:
    types = set(types)
    return bool(types & FOUR_BIT) and types <= FOUR_BIT_MIX


def all_exact_in_int4(types: Iterable[str]) -> bool:
    types = set(types)
    return bool(types) and types <= EXACT_IN_INT4


def cpu_int4_kernel_available() -> bool:
    """PyTorch's CPU int4 weight-only kernel arrived in 2.6; older builds get 8-bit weights."""
    ops = torch.ops.aten
    return hasattr(ops, "_weight_int4pack_mm_for_cpu") and hasattr(
        ops, "_convert_weight_to_int4pack_for_cpu"
    )


def resolve_quantization(quantization: str | None, source: ModelSource, device: str) -> str | None:
    """``quantization`` with ``"auto"`` resolved for ``source`` on ``device`` (see the module)."""
    if quantization != "auto":
        return quantization
    if not device.startswith("cpu"):
        return None
    if source.gguf_file is not None and not source.is_hub:
        types = gguf_decoder_types(Path(source.directory) / source.gguf_file)
        if all_exact_in_int4(types) and cpu_int4_kernel_available():
            return "int4"
        # Building the kernel once per machine is part of the first such load (seconds).
        if a_four_bit_file(types) and cpu_kernels.available():
            return "w4a8"
    return "w8a8" if fbgemm_is_the_engine() else "int8"
