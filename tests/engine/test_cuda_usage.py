"""The engine's CUDA readings without a GPU: none on the CPU; NVML sampled, then given up.

The readings on a real device are checked in test_cuda.py (skipped without CUDA). Here torch's
CUDA calls are replaced, to check what the monitor makes of them.
"""

from __future__ import annotations

import pytest
import torch

from engine.cuda_usage import CudaMonitor, cuda_monitor


def test_only_a_cuda_device_gets_a_monitor() -> None:
    assert cuda_monitor("cpu") is None
    assert cuda_monitor("mps") is None
    monitor = cuda_monitor("cuda:0")
    assert isinstance(monitor, CudaMonitor) and monitor.device == torch.device("cuda:0")


def test_memory_is_read_every_time_and_utilisation_at_most_once_per_period(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    allocated = iter([100, 200, 300])
    busy = iter([37, 90])
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: next(allocated))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: 512)
    monkeypatch.setattr(torch.cuda, "utilization", lambda device: next(busy))
    monitor = CudaMonitor("cuda", utilization_every_s=3600)
    first, second = monitor.read(), monitor.read()
    assert (first.memory_allocated_bytes, first.memory_reserved_bytes) == (100, 512)
    assert second.memory_allocated_bytes == 200
    assert first.utilization == second.utilization == pytest.approx(0.37)  # one NVML call
    monitor.utilization_every_s = 0
    assert monitor.read().utilization == pytest.approx(0.90)


def test_utilisation_is_left_out_for_good_where_nvml_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []

    def no_nvml(device: object) -> int:
        calls.append(device)
        raise ModuleNotFoundError("nvidia-ml-py does not seem to be installed")

    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: 1)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: 2)
    monkeypatch.setattr(torch.cuda, "utilization", no_nvml)
    monitor = CudaMonitor("cuda", utilization_every_s=0)
    readings = [monitor.read() for _ in range(3)]
    assert [r.utilization for r in readings] == [None, None, None]
    assert readings[-1].memory_reserved_bytes == 2  # the memory figures stay
    assert len(calls) == 1  # not asked again after the first failure
