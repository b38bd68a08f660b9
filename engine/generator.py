"""The synchronous generator interface (``LLMEngine``, ``HFGenerator``); the pipeline talks to
one through the async engine client of ``engine.client``, whose registry builds backends by
name."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from engine.outputs import RequestOutput
from engine.sampling_params import SamplingParams


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
