"""Llama-family decoder (Llama, SmolLM2, Mistral, Qwen2) on a paged KV cache.

Parameter names follow the Hugging Face checkpoints, so a ``safetensors`` state dict loads with
``load_state_dict`` unchanged. Grouped-query attention, tied embeddings, qkv bias (Qwen2) and the
rope scalings transformers defines (llama3, yarn, ...) are supported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from engine.layers.attention import AttentionMetadata, paged_attention, write_kv
from engine.layers.int4 import Int4Embedding, quantize_linears_int4
from engine.layers.quantization import Int8Embedding, Int8Linear, quantize_linears
from engine.layers.rotary import RotaryEmbedding, apply_rotary

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2")


class RMSNorm(nn.Module):
    """Root-mean-square norm computed in float32, as the reference implementation does."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.to(x.dtype).mul_(self.weight)  # in place: one tensor fewer per call


class Attention(nn.Module):
    def __init__(self, config: Any, head_dim: int, qkv_bias: bool):
        super().__init__()
        hidden = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = head_dim
        self.q_size = self.num_heads * head_dim
        self.kv_size = self.num_kv_heads * head_dim
        # The checkpoint's q_proj, k_proj and v_proj in one matrix (``load_weights``): one
        # matrix product instead of three, which on a CPU is most of a small model's step.
        self.qkv_proj = nn.Linear(hidden, self.q_size + 2 * self.kv_size, bias=qkv_bias)
        self.o_proj = nn.Linear(self.q_size, hidden, bias=False)
        self.scale = head_dim**-0.5

    def forward(
        self,
        x: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
        kv_cache: tuple[torch.Tensor, torch.Tensor],
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        n = x.shape[0]
        q, k, v = self.qkv_proj(x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(n, self.num_heads, self.head_dim)
        k = k.view(n, self.num_kv_heads, self.head_dim)
        v = v.view(n, self.num_kv_heads, self.head_dim)
        q, k = apply_rotary(q, k, *rotary)
        k_cache, v_cache = kv_cache
        write_kv(k_cache, meta.slot_mapping, k)
        write_kv(v_cache, meta.slot_mapping, v)
        out = paged_attention(q, k, v, k_cache, v_cache, meta, self.scale)
        return self.o_proj(out.reshape(n, self.num_heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, config: Any):
        super().__init__()
        hidden, inner = config.hidden_size, config.intermediate_size
        self.inner = inner
        self.gate_up_proj = nn.Linear(hidden, 2 * inner, bias=False)  # gate_proj over up_proj
        self.down_proj = nn.Linear(inner, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.inner, dim=-1)
        return self.down_proj(F.silu(gate).mul_(up))


class DecoderLayer(nn.Module):
    def __init__(self, config: Any, head_dim: int, qkv_bias: bool):
        super().__init__()
        self.self_attn = Attention(config, head_dim, qkv_bias)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self,
        x: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
        kv_cache: tuple[torch.Tensor, torch.Tensor],
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        """Updates the residual stream ``x`` in place and returns it."""
        x += self.self_attn(self.input_layernorm(x), rotary, kv_cache, meta)
        x += self.mlp(self.post_attention_layernorm(x))
        return x


class LlamaModel(nn.Module):
    def __init__(self, config: Any, head_dim: int, qkv_bias: bool):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            DecoderLayer(config, head_dim, qkv_bias) for _ in range(config.num_hidden_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class LlamaForCausalLM(nn.Module):
    """``forward(input_ids, positions, kv_caches, meta) -> hidden``; ``logits(hidden)``."""

    def __init__(self, config: Any):
        super().__init__()
        model_type = getattr(config, "model_type", "llama")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(f"model type {model_type!r} is not one of {SUPPORTED_MODEL_TYPES}")
        self.config = config
        self.head_dim = int(
            getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        )
        qkv_bias = model_type == "qwen2" or bool(getattr(config, "attention_bias", False))
        self.model = LlamaModel(config, self.head_dim, qkv_bias)
        self.rotary = RotaryEmbedding(config, self.head_dim)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.tie_word_embeddings = bool(getattr(config, "tie_word_embeddings", False))
        if self.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @property
    def num_layers(self) -> int:
        return len(self.model.layers)

    @property
    def num_kv_heads(self) -> int:
        return int(self.config.num_key_value_heads)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        """Final hidden states (num_tokens, hidden) of the flat batch."""
        x = self.model.embed_tokens(input_ids)
        rotary = self.rotary.cos_sin(positions, x.dtype)
        for layer, kv_cache in zip(self.model.layers, kv_caches, strict=True):
            x = layer(x, rotary, kv_cache, meta)
        return self.model.norm(x)

    def quantize_int8(self) -> None:
        """Swap every linear layer, the LM head included, for int8 weight-only ones (after the
        weights are loaded and on their device). Tied embeddings then read the LM head's int8
        rows, untied ones get an int8 table of their own: the model keeps no float copy of its
        largest matrices."""
        for layer in self.model.layers:
            quantize_linears(layer)
        self._quantize_head_int8(untied_embedding=Int8Embedding.from_embedding)

    def quantize_int4(self) -> None:
        """The decoder layers' linear layers in int4 (groups of 32 weights, GGUF's blocks), the LM
        head in int8: as llama.cpp's Q4_K_M keeps its output matrix at more bits, the one matrix
        every token's choice is read from keeps its precision. A tied embedding reads the head's
        int8 rows; an untied one is kept in int4, as Q4_K_M stores it."""
        for layer in self.model.layers:
            quantize_linears_int4(layer)
        self._quantize_head_int8(untied_embedding=Int4Embedding)

    def _quantize_head_int8(self, untied_embedding: Callable[[nn.Embedding], nn.Module]) -> None:
        """The LM head in int8 (kept on the kernel at any row count: its rows are sequences), and
        the embedding reading its rows when tied, else ``untied_embedding`` of its own table."""
        head = Int8Linear.from_linear(self.lm_head)
        head.dense_prefill = False
        self.lm_head = head  # type: ignore[assignment]
        embedding = (
            Int8Embedding.tied_to(head)
            if self.tie_word_embeddings
            else untied_embedding(self.model.embed_tokens)
        )
        self.model.embed_tokens = embedding  # type: ignore[assignment]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits in float32."""
        return self.lm_head(hidden).float()

    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Load a Hugging Face state dict (a missing lm_head means tied embeddings)."""
        state = dict(state_dict)
        if self.tie_word_embeddings:
            state.pop("lm_head.weight", None)
        state = {k: v for k, v in state.items() if not k.endswith("rotary_emb.inv_freq")}
        state = fuse_projections(state)
        missing, unexpected = self.load_state_dict(state, strict=False)
        missing = [m for m in missing if not (self.tie_word_embeddings and m == "lm_head.weight")]
        if missing or unexpected:
            raise ValueError(
                "weights do not match the model: "
                f"missing {missing[:5]}, unexpected {unexpected[:5]}"
            )


_FUSED = {
    "self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
}


def fuse_projections(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A Hugging Face state dict with each layer's q/k/v and gate/up projections stacked into
    the fused matrices our layers hold (their rows in that order, biases alike)."""
    fused = dict(state)
    for name in state:
        for target, parts in _FUSED.items():
            suffix = name.rsplit(".", 1)[-1]  # weight or bias
            if not name.endswith(f"{parts[0]}.{suffix}"):
                continue
            prefix = name[: -len(f"{parts[0]}.{suffix}")]
            keys = [f"{prefix}{part}.{suffix}" for part in parts]
            if all(key in fused for key in keys):
                fused[f"{prefix}{target}.{suffix}"] = torch.cat([fused.pop(key) for key in keys])
    return fused
