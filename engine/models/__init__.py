"""Model implementations that run on the engine's paged KV cache."""

from engine.models.llama import SUPPORTED_MODEL_TYPES, LlamaForCausalLM

__all__ = ["SUPPORTED_MODEL_TYPES", "LlamaForCausalLM"]
