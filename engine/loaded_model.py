"""Load a Llama-family model for the engine: resolve its weights, build our model, quantize."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from engine.config import EngineConfig
from engine.errors import ModelLoadError
from engine.model_loader import (
    CheckpointTensors,
    ModelSource,
    load_config_and_tokenizer,
    resolve_model,
)
from engine.models.llama import SUPPORTED_MODEL_TYPES, LlamaForCausalLM
from engine.weight_formats import resolve_quantization

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """Our model on its device, with what came beside its weights."""

    source: ModelSource
    model: LlamaForCausalLM
    hf_config: Any
    tokenizer: PreTrainedTokenizerBase
    generation_config: Any
    quantization: str | None
    """The weight format it runs in (``"auto"`` resolved)."""


def load_model(model: str | None, config: EngineConfig, device: str) -> LoadedModel:
    """Build ``model`` (a profile, GGUF file or model directory; None = the default) in
    ``config``'s dtype on ``device``, with ``config``'s quantization (``auto`` resolved for this
    model: each model of a pair gets its own) applied."""
    source = resolve_model(model, allow_hub=config.allow_hub, cache_dir=config.cache_dir)
    directory, hf_config, tokenizer, generation_config = load_config_and_tokenizer(
        source, config.cache_dir
    )
    if getattr(hf_config, "model_type", None) not in SUPPORTED_MODEL_TYPES:
        raise ModelLoadError(
            f"the engine runs {SUPPORTED_MODEL_TYPES} models, not {hf_config.model_type!r}: "
            "use the transformers backend ('hf')"
        )
    quantization = resolve_quantization(config.quantization, source, device)
    llama = LlamaForCausalLM.from_checkpoint(
        hf_config,
        CheckpointTensors(Path(directory)),
        device=device,
        dtype=getattr(torch, config.resolved_dtype()),
        quantization=quantization,
    )
    return LoadedModel(source, llama, hf_config, tokenizer, generation_config, quantization)
