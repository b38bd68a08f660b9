"""The generator's settings: the model, the backend and the engine's knobs."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from engine import EngineConfig
from rag.settings.base import Group, empty_is_none

if TYPE_CHECKING:
    from engine import RemoteConfig

_ENGINE = EngineConfig()
"""The engine's defaults: a knob both have takes its default from here (one default per knob)."""


class EngineSettings(Group):
    """The generator: which model, which backend, and the engine's knobs (``EngineConfig``'s fields
    by their names, with its defaults)."""

    model: str | None = Field(
        None, description="GGUF file or HF model dir; empty = SmolLM2-135M-Instruct"
    )
    generator: Literal["auto", "engine", "engine-process", "hf", "openai"] = Field(
        "auto",
        description="auto (engine-process in the API server, engine elsewhere), engine (paged "
        "KV, continuous batching, stepped by a thread), engine-process (the same engine in a "
        "process of its own: its steps never stall the server's other work), hf "
        "(transformers) or openai (a remote OpenAI-compatible server: generator_url)",
    )
    generator_url: str | None = Field(
        None,
        description="generator=openai: the server's OpenAI base URL, e.g. http://host:8000/v1",
    )
    generator_model: str | None = Field(
        None, description="generator=openai: the model to ask for; empty = the server's first"
    )
    generator_api_key: SecretStr | None = Field(
        None, description="generator=openai: sent as a bearer token"
    )
    generator_tokenizer: str | None = Field(
        None,
        description="generator=openai: a local copy of the model's tokenizer (GGUF file, HF "
        "model dir, or 'default' for the embedded SmolLM2); empty = ChatML prompts and "
        "estimated token counts",
    )
    generator_max_model_len: int | None = Field(
        None, ge=16, description="generator=openai: context window; empty = the server's"
    )
    generator_timeout_s: float = Field(
        300.0, gt=0, description="generator=openai: longest wait for the next byte"
    )
    generator_max_retries: int = Field(
        3, ge=0, le=10, description="generator=openai: retries before the first byte (backoff)"
    )
    generator_startup_timeout_s: float = Field(
        600.0,
        ge=0,
        description="generator=openai: how long a server that does not answer yet (still "
        "loading its model) may take to come up; the server answers meanwhile, /readyz "
        "'waiting'",
    )
    device: str = Field(_ENGINE.device, description="auto, cpu, cuda, cuda:N")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = _ENGINE.dtype  # type: ignore[assignment]
    allow_hub: bool = Field(
        _ENGINE.allow_hub, description="allow downloading models from the Hugging Face hub"
    )
    cache_dir: Path | None = Field(
        _ENGINE.cache_dir, description="converted-weights cache; default ~/.cache/ragguard/models"
    )
    max_num_seqs: int = Field(
        _ENGINE.max_num_seqs, ge=1, le=1024, description="sequences generated together"
    )
    max_num_batched_tokens: int = Field(
        _ENGINE.max_num_batched_tokens, ge=16, le=65536, description="engine token budget per step"
    )
    kv_cache_memory_mb: int = Field(
        _ENGINE.kv_cache_memory_bytes >> 20, ge=1, description="engine KV cache memory budget (MiB)"
    )
    reserve_max_tokens: bool = Field(
        _ENGINE.reserve_max_tokens,
        description="engine admits a request only when the KV pool can hold every running "
        "sequence to max_tokens (false: admit sooner, preempt and recompute when full)",
    )
    cuda_graphs: bool = Field(
        _ENGINE.cuda_graphs,
        description="engine replays decode steps as CUDA graphs (CUDA devices only)",
    )
    quantization: Literal["auto", "int8", "int4", "w8a8", "w4a8"] | None = Field(
        "auto",
        description="engine weights: auto = on a CPU int4 for a GGUF whose decoder matrices are "
        "all Q4_1 (the default SmolLM2), w4a8 for another 4-bit GGUF (Q4_K_M, the 1.5B's) where "
        "our AVX2 kernel builds, w8a8 for any other model on an x86 CPU (int8 on "
        "another); the model's dtype on a GPU (SmolLM2's int4 kept task accuracy within a point "
        "of float32 and decodes 1.5x as fast, the 1.5B's w8a8 within 2 points on three sets at "
        "0.65x int8's first token: docs/benchmarks.md); none = the model's dtype (float32 on a "
        "CPU); int8 = per-channel int8 weight-only linear layers (a quarter of fp32's bytes); "
        "int4 = the decoder's linear layers in 4-bit groups of 32 (GGUF's blocks) and the LM "
        "head in int8 (about a sixth; CPU only); w8a8 = int8 decoder weights times int8 "
        "activations quantized per token, multiplied in integers by fbgemm (CPU only; the MLP's "
        "down projection and the LM head int8); w4a8 = int4's 4-bit weights times activations "
        "rounded to 8 bits in blocks of 32, multiplied in integers by ragguard's own AVX2 kernel "
        "(x86 CPU only, compiled on first use)",
    )
    speculative: Literal["prompt_lookup", "draft", "draft+prompt_lookup"] | None = Field(
        _ENGINE.speculative,  # type: ignore[arg-type]
        description="engine speculative decoding: empty = off; draft = a smaller model of the "
        "same tokenizer (draft_model) guesses num_draft_tokens a step; draft+prompt_lookup = "
        "prompt lookup first, the draft model when it finds nothing; prompt_lookup = draft tokens "
        "copied from the prompt and answer so far, kept when the model agrees",
    )
    num_speculative_tokens: int = Field(
        _ENGINE.num_speculative_tokens, ge=1, le=16, description="prompt lookup draft length"
    )
    prompt_lookup_max: int = Field(
        _ENGINE.prompt_lookup_max, ge=1, le=16, description="longest n-gram prompt lookup matches"
    )
    prompt_lookup_min: int = Field(
        _ENGINE.prompt_lookup_min, ge=1, le=16, description="shortest n-gram it matches"
    )
    draft_model: str | None = Field(
        _ENGINE.draft_model,
        description="speculative=draft: the draft model (profile, GGUF file or HF model dir), "
        "e.g. qwen2.5-coder-0.5b for qwen2.5-coder-1.5b",
    )
    num_draft_tokens: int = Field(
        _ENGINE.num_draft_tokens, ge=1, le=16, description="draft model: guesses per step"
    )
    draft_quantization: Literal["same", "auto", "int8", "int4", "w8a8", "w4a8"] | None = Field(
        _ENGINE.draft_quantization,  # type: ignore[arg-type]
        description="draft model's weights: same = as quantization; none (or empty) = the "
        "draft's own dtype (float32 on a CPU); else any quantization value, for a draft whose "
        "fastest format at one row differs from the target's at k + 1",
    )
    decoding: Literal["context_aware", "contrastive"] | None = Field(
        _ENGINE.decoding,  # type: ignore[arg-type]
        description="engine token choice: empty = the model's own distribution; contrastive = "
        "against a weaker amateur_model; context_aware = the prompt with its passages against "
        "the same prompt without them (each answer decodes both)",
    )
    amateur_model: str | None = Field(
        _ENGINE.amateur_model,
        description="decoding=contrastive: the weaker model of the same tokenizer",
    )
    contrast_weight: float = Field(
        _ENGINE.contrast_weight,
        ge=0.0,
        le=10.0,
        description="contrastive/context_aware: how strongly the weak distribution is subtracted",
    )
    contrast_cutoff: float = Field(
        _ENGINE.contrast_cutoff,
        ge=0.0,
        lt=1.0,
        description="contrastive/context_aware: plausibility cut-off, a share of the top "
        "token's probability",
    )
    speculative_max_seqs: int = Field(
        _ENGINE.speculative_max_seqs,
        ge=0,
        le=1024,
        description="prompt lookup drafts only while at most this many decode",
    )
    process_nice: int = Field(
        _ENGINE.process_nice,
        ge=0,
        le=19,
        description="generator=engine-process: the engine process's niceness; raised, the "
        "server's own threads (HTTP, health, guards) run first when the cores are busy",
    )

    _empty_is_none = field_validator(
        "quantization",
        "draft_quantization",
        "speculative",
        "draft_model",
        "decoding",
        "amateur_model",
        mode="before",
    )(empty_is_none)

    @model_validator(mode="after")
    def _two_models_need_their_second(self) -> EngineSettings:
        if self.speculative in ("draft", "draft+prompt_lookup") and not self.draft_model:
            raise ValueError(f"speculative={self.speculative} needs draft_model")
        if self.decoding == "contrastive" and not self.amateur_model:
            raise ValueError("decoding=contrastive needs amateur_model")
        if self.decoding is not None and self.speculative is not None:
            raise ValueError("decoding and speculative exclude each other: choose one")
        if self.decoding is not None and self.generator in ("hf", "openai"):
            raise ValueError(f"decoding={self.decoding} needs our engine, not {self.generator}")
        return self

    @model_validator(mode="after")
    def _remote_needs_a_url(self) -> EngineSettings:
        if self.generator == "openai" and not self.generator_url:
            raise ValueError("generator=openai needs generator_url (RAGGUARD_GENERATOR_URL)")
        if self.generator_url and not self.generator_url.startswith(("http://", "https://")):
            raise ValueError(f"generator_url must be http(s)://..., got {self.generator_url!r}")
        return self

    @model_validator(mode="after")
    def _lookup_range(self) -> EngineSettings:
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise ValueError(
                f"prompt_lookup_min ({self.prompt_lookup_min}) must not exceed "
                f"prompt_lookup_max ({self.prompt_lookup_max})"
            )
        return self

    def generator_backend(self, *, serving: bool = False) -> str:
        """The engine-client backend to build: ``auto`` is the engine in a process of its own
        for the API server (``serving``: its health checks measured 9 ms p99 under a 10x load
        against 1.8 s with the engine's thread in the server; docs/benchmarks.md), and the
        engine in a thread of the caller's process elsewhere (SDK, CLI, eval)."""
        if self.generator != "auto":
            return self.generator
        return "engine-process" if serving else "engine"

    def engine_config(self) -> EngineConfig:
        """The engine configuration these settings describe: every field ``EngineConfig`` has
        by the same name, the KV budget in bytes, and the context window of a remote model."""
        shared = {
            f.name: getattr(self, f.name)
            for f in fields(EngineConfig)
            if f.name in type(self).model_fields
        }
        shared["quantization"] = self.resolved_quantization()
        return EngineConfig(
            **shared,
            kv_cache_memory_bytes=self.kv_cache_memory_mb << 20,
            max_model_len=self.generator_max_model_len if self.generator == "openai" else None,
        )

    def resolved_quantization(self) -> str | None:
        """``auto`` stays ``auto`` for our engine, which resolves it per model at load (int4
        for an all-Q4_1 GGUF on a CPU, else w8a8 on an x86 CPU and int8 on another, the
        model's dtype on a GPU), and is none in another backend (transformers, a remote
        server)."""
        if self.quantization == "auto" and self.generator in ("hf", "openai"):
            return None
        return self.quantization

    def remote_config(self, *, connect_in_background: bool = False) -> RemoteConfig | None:
        """The ``openai`` backend's server (its ``options``), or None for the other backends."""
        if self.generator != "openai":
            return None
        from engine import RemoteConfig

        assert self.generator_url is not None  # checked by _remote_needs_a_url
        return RemoteConfig(
            base_url=self.generator_url,
            model=self.generator_model,
            api_key=None
            if self.generator_api_key is None
            else self.generator_api_key.get_secret_value(),
            tokenizer=self.generator_tokenizer,
            timeout_s=self.generator_timeout_s,
            max_retries=self.generator_max_retries,
            startup_timeout_s=self.generator_startup_timeout_s,
            connect_in_background=connect_in_background,
        )
