"""The decoder's small layers against the reference arithmetic they replace, bit for bit."""

from __future__ import annotations

import pytest
import torch

from engine.layers.rotary import apply_rotary
from engine.models.llama import RMSNorm


def reference_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Hugging Face Llama's RMSNorm: float32 statistics, cast back, then the weight."""
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 7, 64])
def test_rms_norm_is_the_reference_bit_for_bit(dtype: torch.dtype, rows: int) -> None:
    generator = torch.Generator().manual_seed(rows)
    norm = RMSNorm(576, eps=1e-5).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(576, generator=generator))
    x = (torch.randn(rows, 576, generator=generator) * 3).to(dtype)
    with torch.inference_mode():
        got = norm(x)
    assert got.dtype == dtype
    assert torch.equal(got, reference_rms_norm(x, norm.weight.detach(), 1e-5))


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
