"""ragguard's inference layer: the engine, the client seam over it, and their types.

The package's names are its public API (``rag/`` imports nothing else). The light ones are
imported here; the engine and the clients that load a model (``LLMEngine``, ``AsyncEngine``,
``ProcessEngine``, ``HFGenerator``, ``RemoteClient``) load torch, transformers or httpx, so they
are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from engine.backends import as_engine_client, backends, build_engine_client, register_backend
from engine.client import EngineClient, generate_all
from engine.config import EngineConfig
from engine.errors import (
    EngineError,
    EngineStartingError,
    EngineUnavailableError,
    ModelLoadError,
    ModelNotFoundError,
    PromptTooLongError,
    RemoteBusyError,
    RemoteRequestError,
)
from engine.generator import Generator
from engine.model_loader import (
    ModelSource,
    load_model_and_tokenizer,
    local_model_dir,
    resolve_model,
)
from engine.model_profiles import DEFAULT_PROFILE, PROFILES, ModelProfile
from engine.outputs import (
    CompletionOutput,
    FinishReason,
    RequestOutput,
    RequestTiming,
    streamable_text,
)
from engine.prompts import Prompt, PromptFacade, PromptTokenizer
from engine.remote_config import RemoteConfig
from engine.sampling_params import PRESETS, SamplingParams
from engine.stats import EngineStats

if TYPE_CHECKING:
    from engine.async_engine import AsyncEngine
    from engine.hf_generator import HFGenerator
    from engine.llm_engine import LLMEngine
    from engine.process_client import ProcessEngine
    from engine.remote import RemoteClient

_ON_FIRST_USE = {
    "AsyncEngine": "engine.async_engine",
    "HFGenerator": "engine.hf_generator",
    "LLMEngine": "engine.llm_engine",
    "ProcessEngine": "engine.process_client",
    "RemoteClient": "engine.remote",
}


def __getattr__(name: str) -> Any:
    if name in _ON_FIRST_USE:
        return getattr(importlib.import_module(_ON_FIRST_USE[name]), name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")


__all__ = [
    "DEFAULT_PROFILE",
    "PRESETS",
    "PROFILES",
    "AsyncEngine",
    "CompletionOutput",
    "EngineClient",
    "EngineConfig",
    "EngineError",
    "EngineStartingError",
    "EngineStats",
    "EngineUnavailableError",
    "FinishReason",
    "Generator",
    "HFGenerator",
    "LLMEngine",
    "ModelLoadError",
    "ModelNotFoundError",
    "ModelProfile",
    "ModelSource",
    "ProcessEngine",
    "Prompt",
    "PromptFacade",
    "PromptTokenizer",
    "PromptTooLongError",
    "RemoteBusyError",
    "RemoteClient",
    "RemoteConfig",
    "RemoteRequestError",
    "RequestOutput",
    "RequestTiming",
    "SamplingParams",
    "as_engine_client",
    "backends",
    "build_engine_client",
    "generate_all",
    "load_model_and_tokenizer",
    "local_model_dir",
    "register_backend",
    "resolve_model",
    "streamable_text",
]
