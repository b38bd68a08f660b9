"""Our own CPU kernels (``cpu_kernels.cpp``): integer products with activations rounded to 8 bits
in blocks of 32, for 4-bit weights (``w4a8``) and 8-bit rows (the LM head under ``w4a8``).

They are compiled from source on first use with PyTorch's extension builder (the C++ compiler and
``ninja``; about a minute, once per machine and source: the build is cached under PyTorch's
extensions directory, ``TORCH_EXTENSIONS_DIR``) and registered as ``torch.ops.ragguard.*``. They
need x86 with AVX2, FMA and F16C. Where they cannot be built or run, ``load`` raises
``KernelsUnavailable`` saying why, and the formats that need them are refused at load.
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("cpu_kernels.cpp")
FLAGS = ["-O3", "-mavx2", "-mfma", "-mf16c", "-fopenmp"]
"""-fopenmp: ``at::parallel_for`` is OpenMP in PyTorch's CPU builds, and without the flag its
pragma is ignored (one thread). The extension then needs ``libgomp.so.1``, the runtime PyTorch
has already loaded, so both share one thread pool."""
_CAPABLE = ("AVX2", "AVX512")


class KernelsUnavailable(ValueError):
    """The CPU kernels cannot run here (the CPU lacks AVX2, or the build failed)."""


@functools.cache
def load() -> None:
    """Build (or find built) and register the kernels; raises ``KernelsUnavailable``."""
    capability = torch.backends.cpu.get_cpu_capability()
    if capability not in _CAPABLE:
        raise KernelsUnavailable(f"the w4a8 kernels need an x86 CPU with AVX2, not {capability}")
    from torch.utils import cpp_extension

    _put_ninja_on_path()
    try:
        cpp_extension.load(
            name="ragguard_cpu_kernels",
            sources=[str(SOURCE)],
            extra_cflags=FLAGS,
            extra_ldflags=["-fopenmp"],
            is_python_module=False,
            verbose=False,
        )
    except (RuntimeError, OSError, ImportError) as error:
        raise KernelsUnavailable(f"the CPU kernels could not be built: {error}") from error


def _put_ninja_on_path() -> None:
    """PyTorch's builder runs ``ninja`` from PATH; the ``ninja`` package (a dependency) installs
    it beside the interpreter, which is not on PATH when the virtual environment is not
    activated (``.venv/bin/python -m pytest``)."""
    if shutil.which("ninja") is not None:
        return
    try:
        import ninja
    except ImportError:
        return  # the builder then says that ninja is missing
    os.environ["PATH"] = os.pathsep.join([ninja.BIN_DIR, os.environ.get("PATH", "")])


def available() -> bool:
    """Whether the kernels load here (building them if needed)."""
    try:
        load()
    except KernelsUnavailable:
        return False
    return True


ROWS = 8
"""Output rows the w4 layout interleaves (``cpu_kernels.cpp``): a layer's rows are padded to it."""


def w4_pack(q: torch.Tensor, scales: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """The kernel's records for 4-bit codes ``q`` [out, in] (0..15) with per block of 32 a
    ``scale`` and an ``offset`` ([out, in / 32], rounded to float16): ``w = q * scale + offset``.
    ``out`` must be a multiple of ``ROWS``."""
    load()
    return torch.ops.ragguard.w4_pack(
        q.to(torch.uint8).contiguous(), scales.float().contiguous(), offsets.float().contiguous()
    )


def w4_unpack(records: torch.Tensor, out_features: int, in_features: int) -> torch.Tensor:
    """The float32 weights [out, in] ``records`` stand for."""
    load()
    return torch.ops.ragguard.w4_unpack(records, out_features, in_features)


def w4a8_linear(x: torch.Tensor, records: torch.Tensor) -> torch.Tensor:
    """``x @ W.T`` for float32 ``x`` [rows, in] and the 4-bit ``W`` ``records`` hold."""
    load()
    return torch.ops.ragguard.w4a8_linear(x, records)


def w8a8_block_linear(
    x: torch.Tensor, weights: torch.Tensor, row_scales: torch.Tensor
) -> torch.Tensor:
    """``x @ (weights * row_scales[:, None]).T`` for float32 ``x`` and int8 ``weights``."""
    load()
    return torch.ops.ragguard.w8a8_block_linear(x, weights, row_scales)


def quantize_activations(x: torch.Tensor) -> torch.Tensor:
    """``x`` as the kernels see it: each row's blocks of 32 rounded to 8 bits (for tests)."""
    load()
    return torch.ops.ragguard.quantize_activations(x)
