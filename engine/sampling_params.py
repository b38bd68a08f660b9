"""Sampling parameters of one generation request, validated on construction."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any


def _check_range(
    name: str, value: float, low: float, high: float, *, low_open: bool = False
) -> None:
    ok = (value > low if low_open else value >= low) and value <= high
    if not ok or math.isnan(value):
        bracket = "(" if low_open else "["
        raise ValueError(f"{name} must be in {bracket}{low}, {high}], got {value}")


@dataclass(slots=True)
class SamplingParams:
    """How to sample completions for one prompt (names and meanings follow vLLM)."""

    n: int = 1
    """Number of completions to return for the prompt."""
    temperature: float = 0.0
    """Softmax temperature; 0 means greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p."""
    top_k: int = 0
    """Keep only the k most likely tokens; 0 disables the filter."""
    min_p: float = 0.0
    """Drop tokens whose probability is below min_p times the most likely token's."""
    seed: int | None = None
    """Random seed for reproducible sampling; None draws from the global generator."""
    max_tokens: int = 256
    """Maximum number of tokens to generate per completion."""
    stop: list[str] = field(default_factory=list)
    """Strings that end a completion; the stop string itself is not returned."""
    stop_token_ids: list[int] = field(default_factory=list)
    """Token ids that end a completion (in addition to the model's end-of-sequence ids)."""
    repetition_penalty: float = 1.0
    """Multiplicative penalty (> 1 discourages) on tokens already in prompt or completion."""
    presence_penalty: float = 0.0
    """Additive penalty on tokens that already appeared in the completion."""
    frequency_penalty: float = 0.0
    """Additive penalty proportional to how often a token appeared in the completion."""
    no_repeat_ngram_size: int = 0
    """Forbid repeating any n-gram of this size; 0 disables."""
    logprobs: int | None = None
    """Also return this many top alternatives per token (the chosen token's is always kept)."""
    ignore_eos: bool = False
    """Keep generating past end-of-sequence tokens (benchmarks with fixed output lengths)."""
    truncate_prompt_tokens: int | None = None
    """If set, keep only the last this-many prompt tokens instead of failing on long prompts."""
    use_beam_search: bool = False
    """Beam search (greedy scoring, as ``transformers.generate(num_beams=beam_width)``): the
    ``n`` best of ``beam_width`` beams are returned; needs temperature 0 and no penalties, stop
    strings, stop check or logprobs."""
    beam_width: int = 4
    """Beams kept per step when ``use_beam_search``."""
    length_penalty: float = 1.0
    """Beam search: a finished beam scores its summed log-probability / length ** this."""
    context_free_prompt: str | list[int] | None = None
    """Context-aware decoding (an engine with ``decoding="context_aware"``): the same request
    without its passages. Each token is chosen by how much more likely the passages make it:
    the engine decodes this prompt beside the real one and contrasts the two distributions."""
    stop_check: Callable[[Sequence[int]], str | None] | None = None
    """Called with the completion's token ids after each generated token; a non-empty string
    ends the completion (finish reason "stop") and becomes its ``stop_reason``. A repetition
    detector here ends a looping generation early instead of at ``max_tokens``."""

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if self.n < 1 or self.n > 64:
            raise ValueError(f"n must be in [1, 64], got {self.n}")
        _check_range("temperature", self.temperature, 0.0, 5.0)
        _check_range("top_p", self.top_p, 0.0, 1.0, low_open=True)
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        _check_range("min_p", self.min_p, 0.0, 1.0)
        if self.max_tokens < 1 or self.max_tokens > 32768:
            raise ValueError(f"max_tokens must be in [1, 32768], got {self.max_tokens}")
        _check_range("repetition_penalty", self.repetition_penalty, 0.0, 10.0, low_open=True)
        _check_range("presence_penalty", self.presence_penalty, -2.0, 2.0)
        _check_range("frequency_penalty", self.frequency_penalty, -2.0, 2.0)
        if self.no_repeat_ngram_size < 0:
            raise ValueError(f"no_repeat_ngram_size must be >= 0, got {self.no_repeat_ngram_size}")
        if self.logprobs is not None and not 0 <= self.logprobs <= 20:
            raise ValueError(f"logprobs must be in [0, 20], got {self.logprobs}")
        if any(not s for s in self.stop):
            raise ValueError("stop strings must be non-empty")
        if self.seed is not None and not 0 <= self.seed < 2**63:
            raise ValueError(f"seed must be in [0, 2**63), got {self.seed}")
        if self.truncate_prompt_tokens is not None and self.truncate_prompt_tokens < 1:
            raise ValueError(
                f"truncate_prompt_tokens must be >= 1, got {self.truncate_prompt_tokens}"
            )
        if self.stop_check is not None and not callable(self.stop_check):
            raise ValueError("stop_check must be a callable taking the completion's token ids")
        if self.use_beam_search:
            self._check_beam_search()
        if self.context_free_prompt is not None and self.use_beam_search:
            raise ValueError(
                "context-aware decoding (context_free_prompt) and beam search exclude each other"
            )

    def _check_beam_search(self) -> None:
        if not 1 <= self.beam_width <= 16:
            raise ValueError(f"beam_width must be in [1, 16], got {self.beam_width}")
        if self.n > self.beam_width:
            raise ValueError(f"n ({self.n}) must not exceed beam_width ({self.beam_width})")
        _check_range("length_penalty", self.length_penalty, -10.0, 10.0)
        unsupported = {
            "temperature": self.temperature != 0.0,
            "repetition_penalty": self.repetition_penalty != 1.0,
            "presence_penalty": self.presence_penalty != 0.0,
            "frequency_penalty": self.frequency_penalty != 0.0,
            "no_repeat_ngram_size": self.no_repeat_ngram_size != 0,
            "stop": bool(self.stop),
            "stop_token_ids": bool(self.stop_token_ids),
            "stop_check": self.stop_check is not None,
            "logprobs": self.logprobs is not None,
            "ignore_eos": self.ignore_eos,
        }
        named = [name for name, used in unsupported.items() if used]
        if named:
            raise ValueError(f"beam search does not support {', '.join(named)}")

    @property
    def num_sequences(self) -> int:
        """Sequences the request runs at once: its beams, or its n samples."""
        return self.beam_width if self.use_beam_search else self.n

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0

    def with_overrides(self, **overrides: Any) -> SamplingParams:
        """A validated copy with some fields replaced (None values are ignored)."""
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    # Presets from the seed articles' parameter recommendations per task type.
    @classmethod
    def greedy(cls, **overrides: Any) -> SamplingParams:
        """Deterministic: always the most likely token (factual QA, tests)."""
        return cls(temperature=0.0).with_overrides(**overrides)

    @classmethod
    def creative(cls, **overrides: Any) -> SamplingParams:
        """Creative writing: temperature 0.9, top_p 0.95, frequency_penalty 0.2."""
        return cls(temperature=0.9, top_p=0.95, frequency_penalty=0.2).with_overrides(**overrides)

    @classmethod
    def technical(cls, **overrides: Any) -> SamplingParams:
        """Technical documentation: temperature 0.3, top_k 40, presence_penalty 0.1."""
        return cls(temperature=0.3, top_k=40, presence_penalty=0.1).with_overrides(**overrides)

    @classmethod
    def dialogue(cls, **overrides: Any) -> SamplingParams:
        """Dialogue: temperature 0.7, top_p 0.9, repetition_penalty 1.1."""
        return cls(temperature=0.7, top_p=0.9, repetition_penalty=1.1).with_overrides(**overrides)

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> SamplingParams:
        """Build a named preset: one of ``PRESETS``."""
        if name not in PRESETS:
            raise ValueError(f"unknown sampling preset {name!r}; choose one of {sorted(PRESETS)}")
        factory = getattr(cls, name)
        params: SamplingParams = factory(**overrides)
        return params


PRESETS = ("greedy", "creative", "technical", "dialogue")
