"""ragguard's inference layer: model resolution, generators and their output types.

Heavy dependencies (torch, transformers) load only when a generator is built.
"""

from engine.config import EngineConfig
from engine.errors import EngineError, ModelLoadError, ModelNotFoundError, PromptTooLongError
from engine.generator import Generator
from engine.outputs import CompletionOutput, FinishReason, RequestOutput, RequestTiming
from engine.sampling_params import PRESETS, SamplingParams

__all__ = [
    "PRESETS",
    "CompletionOutput",
    "EngineConfig",
    "EngineError",
    "FinishReason",
    "Generator",
    "ModelLoadError",
    "ModelNotFoundError",
    "PromptTooLongError",
    "RequestOutput",
    "RequestTiming",
    "SamplingParams",
]
