"""Llama-family decoder (Llama, SmolLM2, Mistral, Qwen2) on a paged KV cache.

Parameter names follow the Hugging Face checkpoints, so a ``safetensors`` state dict loads with
``load_state_dict`` unchanged. Grouped-query attention, tied embeddings, qkv bias (Qwen2) and the
rope scalings transformers defines (llama3, yarn, ...) are supported.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from engine.layers.attention import AttentionMetadata, paged_attention, write_kv
from engine.layers.int4 import Int4Embedding, quantize_linears_int4
from engine.layers.quantization import Int8Embedding, Int8Linear, quantize_linears
from engine.layers.rotary import RotaryEmbedding, apply_rotary
from engine.layers.w4a8 import BlockInt8Linear, quantize_linears_w4a8
from engine.layers.w8a8 import quantize_linears_w8a8

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
        # The checkpoint's q_proj, k_proj and v_proj in one matrix (``fuse_projections``): one
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
        qk, v = self.qkv_proj(x).split([self.q_size + self.kv_size, self.kv_size], dim=-1)
        qk = apply_rotary(qk.view(n, self.num_heads + self.num_kv_heads, self.head_dim), *rotary)
        q, k = qk.split([self.num_heads, self.num_kv_heads], dim=1)
        v = v.view(n, self.num_kv_heads, self.head_dim)
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

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits in float32."""
        return self.lm_head(hidden).float()

    @classmethod
    def from_checkpoint(
        cls,
        config: Any,
        tensors: TensorSource,
        *,
        device: str | torch.device,
        dtype: torch.dtype,
        quantization: str | None = None,
    ) -> LlamaForCausalLM:
        """Build the model from a Hugging Face checkpoint's tensors one decoder layer at a time:
        each layer's float weights are read, moved to ``device`` in ``dtype`` and, with
        ``quantization`` (``"int8"``, ``"int4"``, ``"w8a8"`` or ``"w4a8"``), quantized before the
        next layer is read.
        The model is first built on the meta device (no memory, no random initialisation), so a
        quantized model's peak is its quantized weights plus one float layer or one
        vocabulary-sized matrix, not the whole float checkpoint twice over. A missing
        ``lm_head.weight`` means tied embeddings."""
        if quantization not in QUANTIZERS:
            raise ValueError(
                f"quantization must be one of {tuple(QUANTIZERS)}, not {quantization!r}"
            )
        with torch.device("meta"):
            model = cls(config)
        model.rotary = RotaryEmbedding(config, model.head_dim).to(device)  # float32 angles
        per_layer: dict[int, list[str]] = {}
        rest: list[str] = []
        for name in tensors.names():
            if name.endswith("rotary_emb.inv_freq") or (
                model.tie_word_embeddings and name == _HEAD
            ):
                continue
            index = _layer_index(name)
            (rest if index is None else per_layer.setdefault(index, [])).append(name)
        unexpected = [n for i, names in per_layer.items() if i >= model.num_layers for n in names]
        if unexpected:  # before any layer is read: a model of the wrong depth fails at once
            raise ValueError(f"weights do not match the model: unexpected {unexpected[:5]}")
        for index, layer in enumerate(model.model.layers):
            prefix = f"model.layers.{index}."
            state = tensors.take(per_layer.pop(index, []))
            local = fuse_projections({k.removeprefix(prefix): v for k, v in state.items()})
            _assign(layer, local, device, dtype, prefix)
            _check_loaded(layer, prefix)
            del state, local  # the float tensors go now, not when the next layer is read
            if (layer_quantize := QUANTIZERS[quantization]) is not None:
                layer_quantize(layer)
        tables = [name for name in rest if name in (_EMBEDDING, _HEAD)]
        _assign(model, tensors.take(name for name in rest if name not in tables), device, dtype, "")
        model._load_tables(tensors, tables, device, dtype, quantization)
        _check_loaded(model, "")
        return model.eval()

    def _load_tables(
        self,
        tensors: TensorSource,
        names: list[str],
        device: str | torch.device,
        dtype: torch.dtype,
        quantization: str | None,
    ) -> None:
        """The vocabulary-sized matrices last, one at a time when quantized: the LM head is read
        and quantized before an untied embedding is read, so the float copies of the two
        largest matrices are never held together.

        Quantized, the LM head is int8 whatever the layers' format (kept on the kernel at any
        row count: its rows are sequences): as llama.cpp's Q4_K_M keeps its output matrix at
        more bits, the one matrix every token's choice is read from keeps its precision. A tied
        embedding reads the head's int8 rows, so the model keeps no float copy of its largest
        matrix; an untied one is quantized on its own: to int4 beside int4 layers (as Q4_K_M
        stores it; under w4a8 too), else to int8 (a lookup reads rows: W8A8 has no activations
        to quantize).
        """
        if quantization is None or _EMBEDDING not in names:
            _assign(self, tensors.take(names), device, dtype, "")
            if self.tie_word_embeddings:
                self.lm_head.weight = self.model.embed_tokens.weight
            return
        if self.tie_word_embeddings:
            _assign(self, tensors.take([_EMBEDDING]), device, dtype, "")
            self.lm_head.weight = self.model.embed_tokens.weight
        elif _HEAD in names:
            _assign(self, tensors.take([_HEAD]), device, dtype, "")
        _check_loaded(self.lm_head, "lm_head.")
        # Under w4a8 the head's int8 rows multiply 8-bit activations through our kernel.
        head_type = BlockInt8Linear if quantization == "w4a8" else Int8Linear
        head = head_type.from_linear(self.lm_head)
        head.dense_prefill = False
        self.lm_head = head  # type: ignore[assignment]
        if self.tie_word_embeddings:
            self.model.embed_tokens = Int8Embedding.tied_to(head)  # type: ignore[assignment]
            return
        _assign(self, tensors.take([_EMBEDDING]), device, dtype, "")
        quantized = (
            Int4Embedding(self.model.embed_tokens)
            if quantization in ("int4", "w4a8")
            else Int8Embedding.from_embedding(self.model.embed_tokens)
        )
        self.model.embed_tokens = quantized  # type: ignore[assignment]


QUANTIZERS = {
    None: None,
    "int8": quantize_linears,
    "int4": quantize_linears_int4,
    "w8a8": quantize_linears_w8a8,
    "w4a8": quantize_linears_w4a8,
}
"""What each weight format does to a decoder layer's linear layers."""

_EMBEDDING = "model.embed_tokens.weight"
_HEAD = "lm_head.weight"


class TensorSource(Protocol):
    """A checkpoint's tensors by Hugging Face name (``engine.model_loader.CheckpointTensors``)."""

    def names(self) -> list[str]: ...

    def take(self, names: Iterable[str]) -> dict[str, torch.Tensor]: ...


def _layer_index(name: str) -> int | None:
    parts = name.split(".")
    if len(parts) > 3 and parts[0] == "model" and parts[1] == "layers" and parts[2].isdigit():
        return int(parts[2])
    return None


def _check_loaded(module: nn.Module, prefix: str) -> None:
    """A parameter the checkpoint did not fill is still on the meta device: an error naming it."""
    missing = [
        prefix + name
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]
        if tensor.is_meta
    ]
    if missing:
        raise ValueError(f"weights do not match the model: missing {missing[:5]}")


def _assign(
    module: nn.Module,
    state: dict[str, torch.Tensor],
    device: str | torch.device,
    dtype: torch.dtype,
    prefix: str,
) -> None:
    """Load ``state`` into ``module``'s meta parameters (assigned, not copied into random ones),
    each on ``device`` in ``dtype``; a tensor that has no parameter is an error naming it."""
    moved = {k: v.to(device=device, dtype=dtype) for k, v in state.items()}
    _, unexpected = module.load_state_dict(moved, strict=False, assign=True)
    if unexpected:
        named = [prefix + name for name in unexpected[:5]]
        raise ValueError(f"weights do not match the model: unexpected {named}")


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
