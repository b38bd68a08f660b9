"""Rotary position embeddings (rotate-half layout, as in Hugging Face Llama checkpoints)."""

from __future__ import annotations

from typing import Any

import torch


def inverse_frequencies(config: Any, head_dim: int) -> tuple[torch.Tensor, float]:
    """(inv_freq, attention_scaling) for the config's rope type (default, llama3, yarn, ...)."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    rope_type = params.get("rope_type", "default")
    if rope_type == "default":
        theta = float(params.get("rope_theta", getattr(config, "rope_theta", 10000.0)))
        exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
        return 1.0 / (theta**exponents), 1.0
    # Scaled variants: use transformers' own definitions so that results match checkpoints.
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    with torch.device("cpu"):  # real numbers even while the model is built on the meta device
        inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu")
    return inv_freq.float(), float(scaling)


class RotaryEmbedding(torch.nn.Module):
    """The rotation angles of the model's rope type at given positions."""

    def __init__(self, config: Any, head_dim: int):
        super().__init__()
        inv_freq, self.attention_scaling = inverse_frequencies(config, head_dim)
        self.inv_freq: torch.Tensor
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def cos_sin(
        self, positions: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin) of each position, shaped (tokens, 1, dim) to broadcast over heads: computed
        once per step and shared by every layer."""
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = (emb.cos() * self.attention_scaling).to(dtype)[:, None, :]
        sin = (emb.sin() * self.attention_scaling).to(dtype)[:, None, :]
        return cos, sin


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` (tokens, heads, dim) by its positions' angles. Queries and keys are rotated
    in one call, as one tensor of ``heads + kv_heads`` heads: the same products, half the calls."""
    half = x.shape[-1] // 2
    rotated_half = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated_half * sin
