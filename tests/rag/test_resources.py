"""The server's resource readings: its resident memory, and a log record's resource fields."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from engine import EngineStats
from rag.server import resources
from rag.server.resources import process_rss_bytes, resource_fields

ON_CPU = EngineStats(
    num_running=1,
    num_waiting=0,
    num_kv_blocks=10,
    num_kv_blocks_used=3,
    prefix_cache_hit_rate=0.0,
    num_preemptions=0,
    num_generated_tokens=0,
    generated_tokens_per_s=0.0,
)


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="Linux's /proc")
def test_resident_memory_is_read_from_proc_like_ps_reads_it() -> None:
    psutil = pytest.importorskip("psutil")
    ours = process_rss_bytes()
    theirs = psutil.Process().memory_info().rss
    assert ours is not None and ours > 10 << 20  # a Python process with torch imported
    assert 0.5 < ours / theirs < 2  # the same figure, give or take what moved in between


def test_without_proc_or_psutil_resident_memory_is_left_out(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(resources, "_STATM", tmp_path / "no-proc")
    monkeypatch.setitem(sys.modules, "psutil", None)  # import psutil now raises ImportError
    assert process_rss_bytes() is None
    assert resource_fields(None) == {}  # left out, not logged as null


def test_without_proc_resident_memory_comes_from_psutil(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("psutil")  # not a dependency: the fallback where it is installed
    monkeypatch.setattr(resources, "_STATM", tmp_path / "no-proc")
    rss = process_rss_bytes()
    assert rss is not None and rss > 10 << 20


def test_log_fields_have_the_kv_blocks_and_the_cuda_figures_only_when_known() -> None:
    assert set(resource_fields(None)) == {"rss_bytes"}  # no engine of ours: no KV pool
    on_cpu = resource_fields(ON_CPU)
    assert on_cpu["rss_bytes"] > 0
    assert (on_cpu["kv_blocks_used"], on_cpu["kv_blocks_free"]) == (3, 7)
    assert not any(name.startswith(("cuda", "gpu")) for name in on_cpu)
    on_gpu = resource_fields(
        replace(
            ON_CPU,
            cuda_memory_allocated_bytes=1 << 30,
            cuda_memory_reserved_bytes=2 << 30,
            gpu_utilization=0.5,
        )
    )
    assert on_gpu["cuda_memory_allocated_bytes"] == 1 << 30
    assert on_gpu["cuda_memory_reserved_bytes"] == 2 << 30
    assert on_gpu["gpu_utilization"] == 0.5
    # Without NVML the memory figures stay and the utilisation is left out.
    no_nvml = resource_fields(
        replace(ON_CPU, cuda_memory_allocated_bytes=1, cuda_memory_reserved_bytes=2)
    )
    assert "gpu_utilization" not in no_nvml and no_nvml["cuda_memory_reserved_bytes"] == 2
