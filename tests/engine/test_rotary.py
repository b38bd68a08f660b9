"""Rotary embeddings applied to queries and keys as one tensor, against transformers' own."""

from __future__ import annotations

import torch

from engine.layers.rotary import apply_rotary


def test_queries_and_keys_rotated_together_equal_each_rotated_alone() -> None:
    """One call on (tokens, heads + kv_heads, dim) gives what transformers' apply_rotary_pos_emb
    gives for queries and keys separately."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    generator = torch.Generator().manual_seed(0)
    tokens, heads, kv_heads, dim = 5, 9, 3, 64
    qk = torch.randn(tokens, heads + kv_heads, dim, generator=generator)
    angles = torch.randn(tokens, dim // 2, generator=generator)
    cos = torch.cat((angles, angles), dim=-1).cos()[:, None, :]
    sin = torch.cat((angles, angles), dim=-1).sin()[:, None, :]
    together = apply_rotary(qk, cos, sin)
    # transformers' layout: (batch, heads, tokens, dim), cos/sin (batch, tokens, dim)
    q, k = qk[:, :heads].transpose(0, 1)[None], qk[:, heads:].transpose(0, 1)[None]
    q_ref, k_ref = apply_rotary_pos_emb(q, k, cos[:, 0][None], sin[:, 0][None])
    assert torch.equal(together[:, :heads], q_ref[0].transpose(0, 1))
    assert torch.equal(together[:, heads:], k_ref[0].transpose(0, 1))
