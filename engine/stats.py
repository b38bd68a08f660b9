"""``EngineStats``: the scheduler, KV-cache and speed counters every backend reports."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EngineStats:
    """Counters for the metrics endpoint."""

    num_running: int
    num_waiting: int
    num_kv_blocks: int
    num_kv_blocks_used: int
    prefix_cache_hit_rate: float
    num_preemptions: int
    num_generated_tokens: int
    generated_tokens_per_s: float
    num_prompt_tokens: int = 0
    """Prompt tokens of every request added since start."""
    num_prefix_queries: int = 0
    """Full prompt blocks looked up in the prefix cache since start."""
    num_prefix_hits: int = 0
    num_cuda_graphs: int = 0
    num_cuda_graph_steps: int = 0
    cuda_graph_capture_s: float = 0.0
    num_draft_tokens: int = 0
    """Speculative decoding: draft tokens computed since start..."""
    num_accepted_tokens: int = 0
    """...and those of them accepted."""
    num_steps_without_speculation: int = 0
    """Steps that drafted nothing because too many sequences were decoding."""
    num_steps: int = 0
    """Steps that ran a batch since start..."""
    step_time_s: float = 0.0
    """...and their total duration: scheduling, the forward pass, sampling and outputs."""
    cuda_memory_allocated_bytes: int | None = None
    """On CUDA: device memory held by tensors (weights, KV cache, activations)..."""
    cuda_memory_reserved_bytes: int | None = None
    """...and held by the caching allocator. None (like the next) on any other device."""
    gpu_utilization: float | None = None
    """On CUDA with NVML: share of its latest sample period in which a kernel ran (0-1)."""
