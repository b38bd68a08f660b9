"""Tiny random Qwen2 models on the default model's tokenizer, for two-model decoding tests."""

from __future__ import annotations

from pathlib import Path

import torch


def tiny_qwen2(directory: Path, tokenizer: object, noise: float) -> None:
    """A two-layer Qwen2 with a sharpened LM head (so that greedy choices have margins); with
    ``noise``, the same weights perturbed by that share of each tensor's spread: a draft that
    agrees with the target on part of its tokens."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer),  # type: ignore[arg-type]
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
    )
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
        generator = torch.Generator().manual_seed(99)
        for weight in model.parameters():
            weight.add_(torch.randn(weight.shape, generator=generator) * noise * weight.std())
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)  # type: ignore[attr-defined]
