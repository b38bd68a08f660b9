"""The engine's CUDA device in its stats: the caching allocator's memory and the GPU's utilisation.

Memory comes from the allocator's own counters, cheap enough to read with every stats call (the
process backend sends its stats after every step). Utilisation comes from NVML, through
``torch.cuda.utilization`` (nvidia-ml-py's ``pynvml``, with ``CUDA_VISIBLE_DEVICES`` mapped to
NVML's device numbers): a driver call, so it is sampled at most once a second, and left out for
good where NVML cannot be used. On the CPU there is no monitor and the stats have none of these.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import torch

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CudaUsage:
    """One reading of the engine's CUDA device."""

    memory_allocated_bytes: int
    """Device memory held by tensors: weights, KV cache, activations."""
    memory_reserved_bytes: int
    """Device memory the caching allocator holds (what the process takes of the device)."""
    utilization: float | None
    """Share of NVML's latest sample period in which a kernel ran (0-1); None without NVML."""


class CudaMonitor:
    """Reads a CUDA device's memory on every call and its utilisation at most every
    ``utilization_every_s`` seconds (the value in between is the last sample's)."""

    def __init__(self, device: str, *, utilization_every_s: float = 1.0) -> None:
        self.device = torch.device(device)
        self.utilization_every_s = utilization_every_s
        self._utilization: float | None = None
        self._sampled_at = -math.inf
        self._nvml = True

    def read(self) -> CudaUsage:
        return CudaUsage(
            memory_allocated_bytes=torch.cuda.memory_allocated(self.device),
            memory_reserved_bytes=torch.cuda.memory_reserved(self.device),
            utilization=self._sample_utilization(),
        )

    def _sample_utilization(self) -> float | None:
        now = time.monotonic()
        if not self._nvml or now - self._sampled_at < self.utilization_every_s:
            return self._utilization
        self._sampled_at = now
        try:
            self._utilization = torch.cuda.utilization(self.device) / 100
        except Exception as exc:  # no nvidia-ml-py, no NVML library, a GPU it does not know
            logger.info("GPU utilisation left out of the engine stats: %s", exc)
            self._nvml, self._utilization = False, None
        return self._utilization


def cuda_monitor(device: str) -> CudaMonitor | None:
    """A monitor for a CUDA ``device``; None for any other device, which reports no such
    figures."""
    return CudaMonitor(device) if device.startswith("cuda") else None
