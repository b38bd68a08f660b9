"""Decode steps replayed as CUDA graphs (``EngineConfig.cuda_graphs``).

A decode step of a small model is hundreds of tiny kernels; launching them one by one from
Python costs more than running them. A CUDA graph records the launches of one step once and
replays them with a single call. A graph fixes every shape and address, so each one is captured
for a bucket: a padded batch size and a padded number of KV blocks per sequence. Inputs are
copied into the bucket's static tensors before each replay; padded rows write their keys and
values into a scratch block that no sequence owns and attend only to it.

Graphs are captured lazily, the first time a bucket is needed, and share one memory pool (they
never run concurrently). Off CUDA, ``DecodeGraphs`` runs the same padded static-shape step
without capturing: the CPU tests check its arithmetic that way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from engine.layers.attention import AttentionMetadata, PagedGroup
from engine.models.llama import LlamaForCausalLM

MIN_BLOCK_BUCKET = 8
"""Smallest padded context, in blocks: shorter contexts share one graph."""


@dataclass(slots=True)
class _Bucket:
    """The static tensors of one captured shape and the callable that runs the step on them."""

    input_ids: torch.Tensor  # (batch,)
    positions: torch.Tensor  # (batch,)
    slot_mapping: torch.Tensor  # (batch,)
    block_tables: torch.Tensor  # (batch, num_blocks)
    context_lens: torch.Tensor  # (batch,)
    logits: torch.Tensor  # (batch, vocab), written by each replay
    replay: Callable[[], object]


def bucket_sizes(limit: int, smallest: int = 1) -> list[int]:
    """Powers of two from ``smallest`` below ``limit``, then ``limit`` itself."""
    sizes = []
    size = smallest
    while size < limit:
        sizes.append(size)
        size *= 2
    return [*sizes, limit]


class DecodeGraphs:
    """Runs batches of single-token decodes through per-shape CUDA graphs."""

    def __init__(
        self,
        model: LlamaForCausalLM,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        scratch_block: int,
        max_num_seqs: int,
        max_blocks_per_seq: int,
        capture: bool | None = None,
    ):
        """``capture``: record CUDA graphs (None: when the cache is on a CUDA device); without
        it each step runs the same padded static-shape computation eagerly."""
        self.model = model
        self.kv_caches = kv_caches
        self.block_size = kv_caches[0][0].shape[1]
        self.device = kv_caches[0][0].device
        self.scratch_block = scratch_block
        self.batch_buckets = bucket_sizes(max_num_seqs)
        self.block_buckets = bucket_sizes(
            max_blocks_per_seq, min(MIN_BLOCK_BUCKET, max_blocks_per_seq)
        )
        if capture is None:
            capture = self.device.type == "cuda"
        elif capture and self.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, not {self.device}")
        self.capture = capture
        self._buckets: dict[tuple[int, int], _Bucket] = {}
        self._pool = torch.cuda.graph_pool_handle() if capture else None

    @property
    def num_captured(self) -> int:
        return len(self._buckets)

    def can_run(self, num_seqs: int, max_blocks: int) -> bool:
        """Whether a decode batch of this size and longest block table has a bucket."""
        return num_seqs <= self.batch_buckets[-1] and max_blocks <= self.block_buckets[-1]

    def run(
        self,
        token_ids: list[int],
        positions: list[int],
        block_tables: list[list[int]],
    ) -> torch.Tensor:
        """Logits (num_seqs, vocab) of one decode token per sequence. The tensor is the bucket's
        static output: read it before the next call."""
        n = len(token_ids)
        batch = _smallest_at_least(self.batch_buckets, n)
        num_blocks = _smallest_at_least(self.block_buckets, max(len(t) for t in block_tables))
        bucket = self._buckets.get((batch, num_blocks))
        if bucket is None:
            bucket = self._buckets[(batch, num_blocks)] = self._build(batch, num_blocks)
        bs = self.block_size
        tables = torch.full((batch, num_blocks), self.scratch_block, dtype=torch.long)
        for i, table in enumerate(block_tables):
            tables[i, : len(table)] = torch.tensor(table)
        pos = torch.zeros(batch, dtype=torch.long)
        pos[:n] = torch.tensor(positions)
        slots = torch.full((batch,), self.scratch_block * bs, dtype=torch.long)
        slots[:n] = tables[torch.arange(n), pos[:n] // bs] * bs + pos[:n] % bs
        ids = torch.zeros(batch, dtype=torch.long)
        ids[:n] = torch.tensor(token_ids)
        # Padding rows sit at position 0 of the scratch block and attend to that one key.
        for static, value in (
            (bucket.input_ids, ids),
            (bucket.positions, pos),
            (bucket.slot_mapping, slots),
            (bucket.block_tables, tables),
            (bucket.context_lens, pos + 1),
        ):
            static.copy_(value)
        bucket.replay()
        return bucket.logits[:n]

    def _build(self, batch: int, num_blocks: int) -> _Bucket:
        dev = self.device
        scratch_slot = self.scratch_block * self.block_size
        input_ids = torch.zeros(batch, dtype=torch.long, device=dev)
        positions = torch.zeros(batch, dtype=torch.long, device=dev)
        slot_mapping = torch.full((batch,), scratch_slot, dtype=torch.long, device=dev)
        block_tables = torch.full(
            (batch, num_blocks), self.scratch_block, dtype=torch.long, device=dev
        )
        context_lens = torch.ones(batch, dtype=torch.long, device=dev)

        def step() -> torch.Tensor:
            # Everything a replay reads must outlive this function: the bucket keeps the static
            # inputs; constants are made inside the graph (a tensor made out here and captured by
            # address would be freed, then reused by other tensors, when this function returns).
            rows = torch.arange(batch, device=dev)
            key_pos = torch.arange(num_blocks * self.block_size, device=dev)
            mask = key_pos[None, :] < context_lens[:, None]
            group = PagedGroup(
                query_index=rows[:, None],
                block_tables=block_tables,
                attn_mask=mask[:, None, None, :],
                rows=rows,
                row_batch=rows,
                row_offset=torch.zeros_like(rows),
            )
            # The gathered blocks are allocated inside the graph: from the shared pool, so the
            # buckets reuse one another's memory rather than each holding its own.
            meta = AttentionMetadata(slot_mapping=slot_mapping, groups=[group])
            hidden = self.model(input_ids, positions, self.kv_caches, meta)
            return self.model.logits(hidden)

        with torch.inference_mode():
            if not self.capture:
                logits = step()
                return _Bucket(
                    input_ids,
                    positions,
                    slot_mapping,
                    block_tables,
                    context_lens,
                    logits,
                    replay=lambda: logits.copy_(step()),
                )
            # Warm up on a side stream (library handles, workspaces), then record.
            side = torch.cuda.Stream(dev)
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):
                step()
            torch.cuda.current_stream(dev).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                logits = step()
        return _Bucket(
            input_ids,
            positions,
            slot_mapping,
            block_tables,
            context_lens,
            logits,
            replay=graph.replay,
        )


def _smallest_at_least(sizes: list[int], n: int) -> int:
    return next(size for size in sizes if size >= n)
