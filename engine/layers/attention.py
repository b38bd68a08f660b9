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
class AttentionMetadata:
    """Where one step's tokens go and what they attend to (built by the model runner).

    Tokens are flattened across sequences ("varlen"): sequence b owns query rows
    ``query_index[b, :query_lens[b]]`` of the flat batch.
    """

    slot_mapping: torch.Tensor
    """(num_tokens,) cache slot of each new token."""
    query_index: torch.Tensor
    """(batch, max_query_len) flat row of each query token (padding points at row 0)."""
    block_tables: torch.Tensor
    """(batch, max_blocks) KV blocks of each sequence, in order (padding: block 0)."""
    attn_mask: torch.Tensor
    """(batch, 1, max_query_len, max_blocks * block_size) True where a query may attend a key."""
    token_batch: torch.Tensor
    """(num_tokens,) sequence of each flat token."""
    token_offset: torch.Tensor
    """(num_tokens,) position of each flat token inside its sequence's query block."""


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
    batch, max_blocks = meta.block_tables.shape
    q_padded = q[meta.query_index].transpose(1, 2)  # (batch, heads, max_q, dim)
    context = (batch, max_blocks * k_cache.shape[1], num_kv_heads, k_cache.shape[3])
    k = k_cache[meta.block_tables].view(context).transpose(1, 2).to(q.dtype)
    v = v_cache[meta.block_tables].view(context).transpose(1, 2).to(q.dtype)
    out = F.scaled_dot_product_attention(
        q_padded, k, v, attn_mask=meta.attn_mask, scale=scale, enable_gqa=num_heads != num_kv_heads
    )
    # Back to flat rows: each real token reads its own (sequence, offset) cell.
    return out.transpose(1, 2)[meta.token_batch, meta.token_offset]
