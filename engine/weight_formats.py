"""The weight format our engine runs a model in when asked for ``quantization="auto"``.

On a GPU: the model's own dtype (the weight-only kernels are CPU-first). On a CPU: int4 where the
file stores every decoder matrix in 4 bits or fewer (a Q4_0 or Q4_1 GGUF such as SmolLM2's): int4's
groups are GGUF's blocks, so it gives those matrices back their own codes and loses nothing the file
had, while decoding faster than int8 (docs/benchmarks.md, "The CPU default"). Everything else gets
int8: a Q4_K_M file keeps some matrices in 6 bits (Qwen2.5's ``ffn_down`` and ``attn_v`` in half
the layers) and a Q5_0 one most of them in 5, which 4 bits would cut; a float checkpoint has no
4-bit form to keep.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path

from engine.model_loader import ModelSource

FOUR_BITS_OR_FEWER = ("Q4_", "Q3_", "Q2_", "IQ4_", "IQ3_", "IQ2_", "IQ1_", "TQ")
"""GGUF tensor types (name prefixes) that store a weight in 4 bits or fewer."""


def is_four_bit(type_name: str) -> bool:
    return type_name.startswith(FOUR_BITS_OR_FEWER)


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


def all_four_bit(types: Iterable[str]) -> bool:
    types = list(types)
    return bool(types) and all(is_four_bit(t) for t in types)


def resolve_quantization(quantization: str | None, source: ModelSource, device: str) -> str | None:
    """``quantization`` with ``"auto"`` resolved for ``source`` on ``device`` (see the module)."""
    if quantization != "auto":
        return quantization
    if not device.startswith("cpu"):
        return None
    if source.gguf_file is None or source.is_hub:
        return "int8"
    types = gguf_decoder_types(Path(source.directory) / source.gguf_file)
    return "int4" if all_four_bit(types) else "int8"
