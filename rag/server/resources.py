"""What the server holds: its resident memory, the engine's KV blocks and CUDA memory.

Read for ``/metrics`` and for each request's log record, so every reading is cheap: one small
``/proc`` file and the engine's stats, which are counters (no model work, no lock taken; on
CUDA the allocator's counters and an NVML reading at most once a second).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from engine import EngineStats

logger = logging.getLogger(__name__)
_STATM = Path("/proc/self/statm")


def process_rss_bytes() -> int | None:
    """This process's resident memory in bytes; None where it cannot be read.

    Linux's ``/proc/self/statm`` (its second field, in pages) needs no dependency; elsewhere
    psutil if it is installed. ``resource.getrusage`` is no fallback: it gives the peak, not the
    current figure."""
    try:
        return int(_STATM.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        pass
    try:
        import psutil
    except ImportError:
        return None
    try:
        return int(psutil.Process().memory_info().rss)
    except psutil.Error:
        return None


def resource_fields(stats: EngineStats | None) -> dict[str, Any]:
    """A request log record's resource fields: ``rss_bytes``; with our engine's stats also
    ``kv_blocks_used`` and ``kv_blocks_free``; on CUDA the device's memory and utilisation.
    A figure that is not known is left out rather than logged as null."""
    fields: dict[str, Any] = {}
    rss = process_rss_bytes()
    if rss is not None:
        fields["rss_bytes"] = rss
    if stats is None:  # the transformers or a remote generator: no KV pool of ours
        return fields
    fields["kv_blocks_used"] = stats.num_kv_blocks_used
    fields["kv_blocks_free"] = stats.num_kv_blocks - stats.num_kv_blocks_used
    cuda = {
        "cuda_memory_allocated_bytes": stats.cuda_memory_allocated_bytes,
        "cuda_memory_reserved_bytes": stats.cuda_memory_reserved_bytes,
        "gpu_utilization": stats.gpu_utilization,
    }
    fields.update({name: value for name, value in cuda.items() if value is not None})
    return fields
