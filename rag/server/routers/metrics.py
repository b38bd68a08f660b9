"""``GET /metrics``: engine counters in the Prometheus text format."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from rag.server.state import StateDep

router = APIRouter(tags=["health"])

_HELP = {
    "num_running": "sequences being generated",
    "num_waiting": "sequences waiting to be scheduled",
    "num_kv_blocks": "KV cache blocks in the pool",
    "num_kv_blocks_used": "KV cache blocks in use",
    "prefix_cache_hit_rate": "share of full prompt blocks found in the prefix cache",
    "num_preemptions": "sequences preempted for lack of KV blocks",
    "num_generated_tokens": "tokens generated since start",
    "generated_tokens_per_s": "tokens generated per second since start",
    "num_cuda_graphs": "decode shapes captured as CUDA graphs",
    "num_cuda_graph_steps": "decode steps replayed from a CUDA graph",
    "cuda_graph_capture_s": "seconds spent capturing CUDA graphs",
}


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(state: StateDep) -> PlainTextResponse:
    """Engine counters (none while the model loads, or with the transformers generator)."""
    lines: list[str] = []
    stats = getattr(state.pipeline.generator, "stats", None) if state.pipeline else None
    if stats is not None:
        for name, value in asdict(stats()).items():
            metric = f"ragguard_engine_{name}"
            lines += [f"# HELP {metric} {_HELP.get(name, name)}", f"# TYPE {metric} gauge"]
            lines.append(f"{metric} {float(value)}")
    return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")
