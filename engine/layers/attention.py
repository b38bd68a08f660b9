"""Attention over a paged KV cache.

The KV cache of one layer is two tensors of shape (num_blocks, block_size, num_kv_heads,
head_dim); a slot is one token position of one block (slot = block_id * block_size + offset).
Each step writes the new tokens' keys and values into their slots, then gathers every sequence's
blocks (whole blocks: a few large copies rather than one per token) into a padded batch and runs
one ``scaled_dot_product_attention`` for the whole batch, masked to each sequence's context.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(slots=True)
class AttentionGroup:
    """Sequences whose queries are padded together: all decodes (one query each), or a single
    prefill chunk. Grouping keeps a long prefill chunk from padding every decode to its length."""

    query_index: torch.Tensor
    """(batch, max_query_len) flat row of each query token (padding points at a real row)."""
    block_tables: torch.Tensor
    """(batch, max_blocks) KV blocks of each sequence, in order (padding: block 0)."""
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
    groups: list[AttentionGroup]


def write_kv(cache: torch.Tensor, slots: torch.Tensor, values: torch.Tensor) -> None:
    """Store new keys or values (num_tokens, heads, dim) in their cache slots."""
    cache.view(-1, *cache.shape[2:]).index_copy_(0, slots, values.to(cache.dtype))


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """Attention of flat queries (num_tokens, heads, dim) over each sequence's cached context."""
    num_heads, num_kv_heads = q.shape[1], k_cache.shape[2]
    out = torch.empty_like(q)
    for group in meta.groups:
        batch, max_blocks = group.block_tables.shape
        q_padded = q[group.query_index].transpose(1, 2)  # (batch, heads, max_q, dim)
        context = (batch, max_blocks * k_cache.shape[1], num_kv_heads, k_cache.shape[3])
        k = k_cache[group.block_tables].view(context).transpose(1, 2).to(q.dtype)
        v = v_cache[group.block_tables].view(context).transpose(1, 2).to(q.dtype)
        attended = F.scaled_dot_product_attention(
            q_padded,
            k,
            v,
            attn_mask=group.attn_mask,
            scale=scale,
            enable_gqa=num_heads != num_kv_heads,
        )
        out[group.rows] = attended.transpose(1, 2)[group.row_batch, group.row_offset]
    return out
