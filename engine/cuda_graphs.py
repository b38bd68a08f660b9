"""Decode steps replayed as CUDA graphs (``EngineConfig.cuda_graphs``).

A decode step of a small model is hundreds of tiny kernels; launching them one by one from
Python costs more than running them. A CUDA graph records the launches of one step once and
replays them with a single call. A graph fixes every shape and address, so each one is captured
for a bucket: a padded batch size and a padded number of KV blocks per sequence. Inputs are
copied into the bucket's static tensors before each replay (one host-to-device copy); padded rows
write their keys and values into a scratch block that no sequence owns and attend only to it.

Graphs are captured lazily, the first time a bucket is needed, and share one memory pool (they
never run concurrently). A batch with no bucket runs eagerly: more sequences than
``max_num_seqs`` (forks of ``n > 1`` requests can exceed it), or a padded batch whose gathered
blocks would outnumber the KV pool's (the gather lives in the graphs' pool, outside the KV
budget). Off CUDA, ``DecodeGraphs`` runs the same padded static-shape step without capturing:
the CPU tests check its arithmetic that way.
"""

from __future__ import annotations

import time
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

    inputs: torch.Tensor
    """(4 * batch + batch * num_blocks,) token ids, positions, slots, context lengths and block
    tables, packed so that one copy refreshes them all."""
    logits: torch.Tensor
    """(batch, vocab), written by each replay; shared by the buckets of one batch size."""
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
    ) -> None:
        """``scratch_block``: a cache block no sequence owns (the block manager hands out
        ``0 .. scratch_block - 1``). ``capture``: record CUDA graphs (None: when the cache is on a
        CUDA device); without it each step runs the same padded computation eagerly."""
        self.model = model
        self.kv_caches = kv_caches
        self.block_size = kv_caches[0][0].shape[1]
        self.device = kv_caches[0][0].device
        self.scratch_block = scratch_block
        self.batch_buckets = bucket_sizes(max_num_seqs)
        # No sequence holds more blocks than the pool has.
        longest = max(1, min(max_blocks_per_seq, scratch_block))
        self.block_buckets = bucket_sizes(longest, min(MIN_BLOCK_BUCKET, longest))
        if capture is None:
            capture = self.device.type == "cuda"
        elif capture and self.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, not {self.device}")
        self.capture = capture
        self.capture_time_s = 0.0
        """Time spent capturing graphs so far (each capture also runs one warm-up step)."""
        self.num_replays = 0
        """Decode steps run through a bucket so far."""
        self._buckets: dict[tuple[int, int], _Bucket] = {}
        self._logits: dict[int, torch.Tensor] = {}
        self._pool = torch.cuda.graph_pool_handle() if capture else None

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """The (batch, blocks) buckets built so far."""
        return sorted(self._buckets)

    def bucket_for(self, num_seqs: int, max_blocks: int) -> tuple[int, int] | None:
        """The (batch, blocks) bucket of a decode batch, or None when it must run eagerly."""
        batch = _smallest_at_least(self.batch_buckets, num_seqs)
        blocks = _smallest_at_least(self.block_buckets, max_blocks)
        if batch is None or blocks is None or batch * blocks > self.scratch_block:
            return None
        return batch, blocks

    def run(
        self,
        shape: tuple[int, int],
        token_ids: list[int],
        positions: list[int],
        block_tables: list[list[int]],
    ) -> torch.Tensor:
        """Logits (num_seqs, vocab) of one decode token per sequence, through the bucket
        ``shape`` (from ``bucket_for``). The tensor is a static output: read it before the next
        call."""
        bucket = self._buckets.get(shape)
        if bucket is None:
            bucket = self._buckets[shape] = self._build(*shape)
        bucket.inputs.copy_(self._pack(shape, token_ids, positions, block_tables))
        bucket.replay()
        self.num_replays += 1
        return bucket.logits[: len(token_ids)]

    def _pack(
        self,
        shape: tuple[int, int],
        token_ids: list[int],
        positions: list[int],
        block_tables: list[list[int]],
    ) -> torch.Tensor:
        """The packed static inputs on the host. Padding rows sit at position 0 of the scratch
        block and attend to that one key."""
        batch, num_blocks = shape
        n, bs = len(token_ids), self.block_size
        packed = torch.zeros(4 * batch + batch * num_blocks, dtype=torch.long)
        ids, pos, slots, ctx = packed[: 4 * batch].view(4, batch)
        tables = packed[4 * batch :].view(batch, num_blocks)
        tables.fill_(self.scratch_block)
        for i, table in enumerate(block_tables):
            tables[i, : len(table)] = torch.tensor(table)
        ids[:n] = torch.tensor(token_ids)
        pos[:n] = torch.tensor(positions)
        slots.fill_(self.scratch_block * bs)
        slots[:n] = tables[torch.arange(n), pos[:n] // bs] * bs + pos[:n] % bs
        ctx.copy_(pos + 1)
        return packed

    def _build(self, batch: int, num_blocks: int) -> _Bucket:
        """Static inputs for the shape (all rows padding to start with) and its graph."""
        inputs = self._pack((batch, num_blocks), [], [], []).to(self.device)
        logits = self._logits.get(batch)
        if logits is None:
            vocab = self.model.lm_head.out_features
            logits = torch.empty(batch, vocab, device=self.device)
            self._logits[batch] = logits

        def step() -> None:
            logits.copy_(self._forward(inputs, batch, num_blocks))

        with torch.inference_mode():
            if not self.capture:
                step()
                return _Bucket(inputs, logits, replay=step)
            started = time.perf_counter()
            # Warm up on a side stream (library handles, workspaces), then record. Only this
            # thread's CUDA calls are checked during capture: the server may embed queries on
            # the same GPU from another thread meanwhile.
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                step()
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
                step()
            self.capture_time_s += time.perf_counter() - started
        return _Bucket(inputs, logits, replay=graph.replay)

    def _forward(self, inputs: torch.Tensor, batch: int, num_blocks: int) -> torch.Tensor:
        """The decode step on the packed static inputs. Every tensor a replay reads must outlive
        the capture: the bucket keeps ``inputs``, and constants are made here, inside the graph
        (a tensor made outside and captured by address is freed, then reused by other tensors,
        once the function that made it returns)."""
        ids, positions, slots, context_lens = inputs[: 4 * batch].view(4, batch)
        block_tables = inputs[4 * batch :].view(batch, num_blocks)
        rows = torch.arange(batch, device=self.device)
        key_pos = torch.arange(num_blocks * self.block_size, device=self.device)
        mask = key_pos[None, :] < context_lens[:, None]
        group = PagedGroup(
            query_index=rows[:, None],
            block_tables=block_tables,
            attn_mask=mask[:, None, None, :],
            rows=rows,
            row_batch=rows,
            row_offset=torch.zeros_like(rows),
        )
        # The gathered blocks are allocated inside the graph, from the shared pool, so the
        # buckets reuse one another's memory rather than each holding its own.
        meta = AttentionMetadata(slot_mapping=slots, groups=[group])
        hidden = self.model(ids, positions, self.kv_caches, meta)
        return self.model.logits(hidden)


def _smallest_at_least(sizes: list[int], n: int) -> int | None:
    return next((size for size in sizes if size >= n), None)
