"""The generator interface the pipeline talks to, and the factory that builds one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from engine.config import EngineConfig
from engine.outputs import RequestOutput
from engine.sampling_params import SamplingParams

BACKENDS = ("engine", "hf")


@runtime_checkable
class Generator(Protocol):
    """Anything that turns prompts into ``RequestOutput``s."""

    @property
    def model_name(self) -> str: ...

    @property
    def max_model_len(self) -> int:
        """Context window in tokens (prompt plus completion)."""
        ...

    def count_tokens(self, prompt: str) -> int: ...

    def apply_chat_template(self, messages: list[dict[str, str]]) -> str: ...

    def generate(
        self, prompts: Sequence[str | list[int]], params: SamplingParams | Sequence[SamplingParams]
    ) -> list[RequestOutput]: ...


def build_generator(config: EngineConfig, backend: str = "hf") -> Generator:
    """Load the model named by ``config`` behind the chosen backend: ``engine`` (ours: paged KV,
    continuous batching) or ``hf`` (``transformers.generate``, the baseline and the fallback for
    architectures the engine does not implement)."""
    if backend == "engine":
        from engine.llm_engine import LLMEngine

        return LLMEngine(config)
    if backend == "hf":
        from engine.hf_generator import HFGenerator

        return HFGenerator(config)
    raise ValueError(f"unknown generator backend {backend!r}; choose one of {BACKENDS}")
