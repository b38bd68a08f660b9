"""Attention over a paged KV cache.

The KV cache of one layer is two tensors of shape (num_blocks, block_size, num_kv_heads,
head_dim); a slot is one token position of one block (slot = block_id * block_size + offset).
Each step writes the new tokens' keys and values into their slots, then runs attention group by
group (see ``AttentionMetadata``):

- a ``CausalChunk`` is the first chunk of a prompt: it has no earlier context, so it attends
  causally to its own fresh keys and values and reads nothing back from the cache;
- a ``PagedGroup`` (decodes of similar context length, or a later prefill chunk) gathers its
  sequences' blocks (whole blocks: a few large copies rather than one per token) into a padded
  batch and runs one ``scaled_dot_product_attention``, masked to each sequence's context.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(slots=True)
class CausalChunk:
    """The first prefill chunk of one sequence: rows ``start .. start + length`` of the flat batch
    attend causally to each other and to nothing else."""

    start: int
    length: int


@dataclass(slots=True)
class PagedGroup:
    """Sequences whose queries are padded together and attend to their cached blocks: decodes
    (one query each) of similar context length, or one later prefill chunk. Grouping keeps a
    long prefill chunk, or one long context, from padding every other sequence to its length."""

    query_index: torch.Tensor
    """(batch, max_query_len) flat row of each query token (padding points at a real row)."""
    block_tables: torch.Tensor
    """(batch, max_blocks) KV blocks of each sequence, in order (padding: any block the mask
    hides: block 0 eagerly, the scratch block in CUDA graphs)."""
    attn_mask: torch.Tensor
    """(batch, 1, max_query_len, max_blocks * block_size) True where a query may attend a key."""
    rows: torch.Tensor
    """(num_tokens,) flat rows of the group's real query tokens..."""
    row_batch: torch.Tensor
    """...their sequence within the group..."""
    row_offset: torch.Tensor
    """...and their position within that sequence's queries."""


@dataclass(slots=True)
class AttentionMetadata:
    """Where one step's tokens go and what they attend to (built by the model runner)."""

    slot_mapping: torch.Tensor
    """(num_tokens,) cache slot of each new token, tokens flattened across sequences."""
    groups: list[CausalChunk | PagedGroup]
    gather_buffers: tuple[torch.Tensor, torch.Tensor] | None = None
    """Reused destinations for the gathered keys and values, each with room for the blocks of
    the largest group (num_blocks, block_size, kv_heads, head_dim). A fresh tensor of tens of MB
    every layer costs more in page faults than the copy itself."""


def write_kv(cache: torch.Tensor, slots: torch.Tensor, values: torch.Tensor) -> None:
    """Store new keys or values (num_tokens, heads, dim) in their cache slots."""
    cache.view(-1, *cache.shape[2:]).index_copy_(0, slots, values.to(cache.dtype))


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """Attention of flat queries (num_tokens, heads, dim) over each sequence's context; ``k`` and
    ``v`` are this step's new keys and values (num_tokens, kv_heads, dim), already in the cache."""
    num_heads, num_kv_heads = q.shape[1], k_cache.shape[2]
    gqa = num_heads != num_kv_heads
    out = torch.empty_like(q)
    for group in meta.groups:
        if isinstance(group, CausalChunk):
            rows = slice(group.start, group.start + group.length)
            attended = F.scaled_dot_product_attention(
                q[rows].transpose(0, 1)[None],
                k[rows].transpose(0, 1)[None].to(q.dtype),
                v[rows].transpose(0, 1)[None].to(q.dtype),
                is_causal=True,
                scale=scale,
                enable_gqa=gqa,
            )
            out[rows] = attended[0].transpose(0, 1)
            continue
        batch, max_blocks = group.block_tables.shape
        q_padded = q[group.query_index].transpose(1, 2)  # (batch, heads, max_q, dim)
        context = (batch, max_blocks * k_cache.shape[1], num_kv_heads, k_cache.shape[3])
        blocks = group.block_tables.flatten()
        k_buffer, v_buffer = meta.gather_buffers or (None, None)
        k_ctx = _gather(k_cache, blocks, k_buffer).view(context).transpose(1, 2)
        v_ctx = _gather(v_cache, blocks, v_buffer).view(context).transpose(1, 2)
        attended = F.scaled_dot_product_attention(
            q_padded,
            k_ctx.to(q.dtype),
            v_ctx.to(q.dtype),
            attn_mask=group.attn_mask,
            scale=scale,
            enable_gqa=gqa,
        )
        out[group.rows] = attended.transpose(1, 2)[group.row_batch, group.row_offset]
    return out


def _gather(cache: torch.Tensor, blocks: torch.Tensor, buffer: torch.Tensor | None) -> torch.Tensor:
    """The cache's ``blocks``, in order, copied into the front of ``buffer`` when one is given.
    ``index_select`` copies whole blocks; plain indexing is about twice as slow on CPU."""
    if buffer is None:
        return cache.index_select(0, blocks)
    return torch.index_select(cache, 0, blocks, out=buffer[: blocks.numel()])
