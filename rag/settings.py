"""All configuration, read from ``RAGGUARD_*`` environment variables (or a ``.env`` file)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from rag.prompt import PassageOrder, system_prompt_for
from rag.types import RetrievalMode

if TYPE_CHECKING:
    from engine import EngineConfig, RemoteConfig

JUDGE_BY_DEFAULT = frozenset({"qwen2.5-coder-1.5b"})
"""Generator profiles that judge their own uncertain answers unless told otherwise."""
MAX_QUESTION_CHARS = 2000
"""The longest question the HTTP API accepts, as its schema states; ``max_question_chars``
may lower the limit, not raise it."""


class Settings(BaseSettings):
    """ragguard settings: built in ``create_app`` or ``Pipeline.from_settings``, never at import."""

    model_config = SettingsConfigDict(env_prefix="RAGGUARD_", env_file=".env", extra="ignore")

    # Models
    model: str | None = Field(
        None, description="GGUF file or HF model dir; empty = SmolLM2-135M-Instruct"
    )
    embedding_model: str | None = Field(
        None, description="sentence-transformers dir; empty = all-MiniLM-L6-v2"
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
    device: str = Field("auto", description="auto, cpu, cuda, cuda:N")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    allow_hub: bool = Field(False, description="allow downloading models from the Hugging Face hub")
    model_cache_dir: Path | None = Field(
        None, description="converted-weights cache; default ~/.cache/ragguard/models"
    )
    max_num_seqs: int = Field(
        32,
        ge=1,
        le=1024,
        description="sequences generated together",
        # RAGGUARD_MAX_BATCH_SIZE: the name before it followed the engine's; still read.
        validation_alias=AliasChoices(
            "max_num_seqs", "RAGGUARD_MAX_NUM_SEQS", "RAGGUARD_MAX_BATCH_SIZE"
        ),
    )
    max_num_batched_tokens: int = Field(
        2048, ge=16, le=65536, description="engine token budget per step"
    )
    kv_cache_memory_mb: int = Field(1024, ge=1, description="engine KV cache memory budget (MiB)")
    reserve_max_tokens: bool = Field(
        True,
        description="engine admits a request only when the KV pool can hold every running "
        "sequence to max_tokens (false: admit sooner, preempt and recompute when full)",
    )
    cuda_graphs: bool = Field(
        False, description="engine replays decode steps as CUDA graphs (CUDA devices only)"
    )
    quantization: Literal["int8"] | None = Field(
        None,
        description="engine weights: empty = the model's dtype; int8 = per-channel int8 "
        "weight-only linear layers (a quarter of fp32's bytes)",
    )
    speculative: Literal["prompt_lookup"] | None = Field(
        None,
        description="engine speculative decoding: empty = off; prompt_lookup = draft tokens "
        "copied from the prompt and answer so far, kept when the model agrees",
    )
    num_speculative_tokens: int = Field(6, ge=1, le=16, description="prompt lookup draft length")
    prompt_lookup_max: int = Field(
        3, ge=1, le=16, description="longest n-gram prompt lookup matches"
    )
    prompt_lookup_min: int = Field(2, ge=1, le=16, description="shortest n-gram it matches")
    speculative_max_seqs: int = Field(
        4, ge=0, le=1024, description="prompt lookup drafts only while at most this many decode"
    )

    # Serving
    engine_process_nice: int = Field(
        0,
        ge=0,
        le=19,
        description="generator=engine-process: the engine process's niceness; raised, the "
        "server's own threads (HTTP, health, guards) run first when the cores are busy",
    )
    worker_threads: int | None = Field(
        None,
        ge=1,
        le=64,
        description="threads the server runs blocking stage work in (retrieval, guards); "
        "fewer leave the event loop fewer competitors for the interpreter lock; empty: "
        "Python's default (cores + 4, at most 32)",
    )
    request_timeout_s: float | None = Field(
        300.0,
        gt=0,
        description="deadline of one question (a request may ask for less); past it the "
        "generation stops and the server answers 504. Empty: no deadline",
    )
    max_concurrent_questions: int = Field(
        16, ge=1, le=4096, description="questions the server works on at once"
    )
    max_waiting_questions: int = Field(
        16,
        ge=0,
        le=100_000,
        description="questions that may wait for a free slot; beyond that the server answers "
        "429 with Retry-After",
    )
    adaptive_concurrency: bool = Field(
        True,
        description="the server finds how many questions at once it can work on without "
        "slowing each, up to max_concurrent_questions (false: always max_concurrent_questions)",
    )
    max_queue_wait_s: float | None = Field(
        15.0,
        gt=0,
        description="a question predicted to wait longer than this for a slot is refused with "
        "429 and Retry-After. Empty: no bound",
    )
    max_queue_wait_services: float | None = Field(
        None,
        gt=0,
        description="... or longer than this many times the time a question takes at low load "
        "(measured; 1: about one answer's time at most). Empty (the default): no such bound",
    )
    shutdown_grace_s: float = Field(
        30.0, ge=0, description="on shutdown, how long in-flight questions may still finish"
    )

    # Index and ingestion
    index_dir: Path = Field(Path("indexes"), description="folder holding one sub-folder per index")
    index_name: str = Field("demo", description="index used when a request names none")
    index_type: Literal["flat", "hnsw"] = Field("flat", description="exact inner product, or HNSW")
    read_only_indexes: bool = Field(
        False,
        description="serve the indexes without writing to them: ingestion, deletion and new "
        "indexes are refused (Ray Serve's API replicas always are)",
    )
    chunk_size: int = Field(256, ge=32, le=8192, description="chunk size in embedding-model tokens")
    chunk_overlap: int = Field(32, ge=0, le=1024, description="tokens shared by consecutive chunks")
    embed_batch_size: int = Field(64, ge=1, le=4096)
    ingest_group_chunks: int = Field(
        1024,
        ge=1,
        description="ingestion commits a group of documents once it holds this many chunks "
        "(or ingest_group_s passed): a crash loses at most the group in progress, and running "
        "the ingestion again skips the committed documents",
    )
    ingest_group_s: float = Field(
        10.0,
        gt=0,
        description="... or once the group took this many seconds to embed, if sooner",
    )
    ingest_max_commit_share: float = Field(
        0.05,
        ge=0.0,
        lt=1.0,
        description="stretch groups so that commits (each rewrites the index's FAISS file) take "
        "at most this share of ingestion time; 0: never stretch",
    )
    max_upload_bytes: int = Field(20 * 1024 * 1024, ge=1, description="largest accepted upload")

    # Answering
    top_k: int = Field(4, ge=1, le=50, description="passages retrieved per question")
    min_score: float = Field(0.25, ge=-1.0, le=1.0, description="cosine similarity a passage needs")
    retrieval: RetrievalMode = Field(
        "dense",
        description="how passages are ranked: dense (embedding similarity), bm25 (the words, "
        "bm25s) or hybrid (both, fused by reciprocal rank); min_score is cosine similarity in "
        "each",
    )
    passage_order: PassageOrder = Field(
        "reuse",
        description="order of the passages in the prompt: reuse (a recent prompt's order for "
        "the passages this one shares with it, then the rest best first: the prefix cache then "
        "serves the shared passages' KV), canonical (by document and position) or rank (best "
        "first)",
    )
    system_prompt: str = Field(
        "",
        max_length=4000,
        description="the rule the generator answers by, sent before the passages; empty = "
        "the model's default (rag.prompt.MODEL_SYSTEM_PROMPTS, else rag.prompt.SYSTEM_PROMPT)",
    )
    max_tokens: int = Field(160, ge=1, le=4096, description="answer length limit in tokens")
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="0 = greedy")
    max_question_chars: int = Field(
        MAX_QUESTION_CHARS,
        ge=1,
        le=MAX_QUESTION_CHARS,
        description="longest accepted question",
    )

    # Guards and decisions
    guards_enabled: bool = Field(True, description="check every answer and decide")
    num_candidates: int = Field(
        1, ge=1, le=16, description="answers sampled per question (>1: self-consistency vote)"
    )
    candidate_temperature: float = Field(0.7, ge=0.0, le=2.0, description="sampling for n > 1")
    candidate_max_tokens: int = Field(
        48,
        ge=1,
        le=4096,
        description="length limit of the extra samples (n > 1): their meaning is compared, "
        "so the first sentences suffice",
    )
    guards: list[str] | None = Field(
        None,
        description="guards to run, by registered name (JSON list); empty = every registered "
        "guard (repetition, grounding, self_consistency, answer_evidence, evidence_conflict, "
        "self_verification, judge, knowledge_graph)",
    )
    self_verification: bool = Field(
        False,
        description="ask the generator whether its answer is supported (P(yes) on the shared "
        "prefix, one short prefill); off by default: at chance for the 135M default model",
    )
    judge_model: str | None = Field(
        None,
        description="the judge (guard 'judge'): a model asked whether each uncertain answer is "
        "correct and supported. Empty = the generator itself when it is qwen2.5-coder-1.5b, "
        "else off; 'off'; 'generator'; or a model as RAGGUARD_MODEL takes (a second engine)",
    )
    judge_quantization: Literal["int8"] | None = Field(
        "int8",
        description="a judge on an engine of its own: its weights (int8 by default: the 1.5B "
        "in float32 is 6 GB); the generator's own setting applies when it judges itself",
    )
    judge_min_confidence: float = Field(
        0.1,
        ge=0.0,
        le=1.0,
        description="the judge reads answers whose first-stage confidence is at least this "
        "... (default: the band the profile's confidence was fitted with, else 0.1-0.9)",
    )
    judge_max_confidence: float = Field(
        0.9, ge=0.0, le=1.0, description="... and at most this (0 and 1: every answer)"
    )
    judge_passages: Literal["cited", "all"] = Field(
        "cited", description="what the judge reads: the passages the answer cites, or all"
    )
    judge_confidence_model: Path | None = Field(
        None,
        description="second-stage confidence for judged answers (JSON); empty = the shipped "
        "one of the generator's profile",
    )
    stop_on_loop: bool = Field(
        True, description="end a generation as soon as it falls into a repetition loop"
    )
    knowledge_graph: Path | None = Field(
        None, description="triples file to check answers against; empty = the demo graph"
    )
    knowledge_graph_aliases: Path | None = None
    confidence_model: Path | None = Field(
        None, description="fitted confidence model (JSON); empty = the shipped fitted default"
    )
    abstain_below: float = Field(
        0.15, ge=0.0, le=1.0, description="withhold under this confidence (docs/benchmarks.md)"
    )
    review_below: float = Field(
        0.2, ge=0.0, le=1.0, description="send to review under this (docs/benchmarks.md)"
    )
    data_dir: Path = Field(Path("data"), description="review queue and other durable state")

    # Human review
    keys_db: str | None = Field(
        None,
        description="the API key store: a SQLite path or postgresql://... URL (the review "
        "store's own database may be given); default data_dir/keys.sqlite",
    )
    review_db: str | None = Field(
        None, description="review store: a SQLite path or postgresql:// URL; empty = data_dir"
    )
    review_claim_ttl_s: float = Field(
        900.0, gt=0, description="how long a reviewer's claim on an item lasts"
    )
    review_sla_s: float = Field(
        24 * 3600.0, gt=0, description="time from queueing to an item's deadline"
    )
    review_gold_rate: float = Field(
        0.1, ge=0.0, lt=1.0, description="share of the queue made of gold items (known answers)"
    )
    review_min_ratings: int = Field(
        0,
        ge=0,
        le=10,
        description="hand resolved items to further reviewers until each has this many ratings "
        "(0: off; the seed's quality control asks for 3)",
    )
    review_gold_file: Path | None = Field(
        None, description="JSONL of gold items: {question, answer, correct}"
    )
    api_keys: Path | None = Field(
        None, description="file of API keys (name role sha256) in addition to data_dir/keys"
    )

    # Risk control learnt from reviewers (guards/risk; README "Choosing the risk you accept")
    target_risk: float | None = Field(
        None,
        gt=0.0,
        lt=1.0,
        description="the error rate you accept, e.g. 0.05: each collection's answer threshold "
        "is chosen from its labels to keep it (empty: the fixed thresholds)",
    )
    risk_confidence: float = Field(
        0.9, gt=0.0, lt=1.0, description="how sure the threshold must be of target_risk"
    )
    risk_mode: Literal["selective", "conformal"] = Field(
        "selective",
        description="selective: wrong answers among answered questions; conformal: wrong "
        "answers delivered among all questions",
    )
    audit_rate: float = Field(
        0.05,
        ge=0.0,
        le=1.0,
        description="share of answers that go out which are also queued for review as audit "
        "items (unbiased labels)",
    )
    audit_rates: dict[str, float] = Field(
        default_factory=dict,
        description='per-collection audit rates, JSON: {"docs": 0.1}',
    )
    audit_seed: int | None = Field(None, description="seed of the audit draw (tests)")
    calibrate_every: int = Field(
        25, ge=0, description="refit a collection's confidence after this many new labels (0: off)"
    )
    calibration_refresh_s: float = Field(
        5.0, gt=0, description="how often a server rereads a collection's calibration and labels"
    )

    # Degrade under load (rag/server/degrade.py)
    degrade_waiting: int = Field(
        4,
        ge=0,
        description="questions waiting for a slot at which answers drop their extra samples; "
        "twice as many also skip the judge (0: not by queue length)",
    )
    degrade_queue_s: float = Field(
        5.0,
        ge=0.0,
        description="recent wait for a slot (seconds) at which answers drop their extra "
        "samples; twice as long also skips the judge (0: not by queue time)",
    )

    # Answer cache (rag/stages/answer_cache.py)
    answer_cache_ttl_s: float = Field(
        3600.0,
        ge=0.0,
        description="serve an answer that went out unreviewed again, for this long, to the same "
        "question asked the same way of the same index content (0: off)",
    )

    # Server
    ray_address: str | None = Field(
        None,
        description="serve --ray: the Ray cluster to join (e.g. ray://head:10001); empty = "
        "a local one",
    )
    ray_api_replicas: int = Field(
        1, ge=1, le=256, description="serve --ray: API replicas (the minimum when autoscaling)"
    )
    ray_engine_replicas: int = Field(1, ge=1, le=256, description="serve --ray: engine replicas")
    ray_autoscale_max_replicas: int | None = Field(
        None, ge=1, le=256, description="serve --ray: autoscale the API replicas up to this many"
    )
    ray_target_ongoing_requests: float = Field(
        2.0, gt=0, description="serve --ray: autoscaling's target of requests per API replica"
    )
    ray_cpus_per_replica: float = Field(
        0.5, ge=0, description="serve --ray: CPUs Ray reserves for each replica"
    )
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    log_format: Literal["json", "text"] = Field(
        "json", description="server logs: one JSON object per line, or plain text"
    )
    log_text: bool = Field(
        False, description="put question and answer text in request logs (default: lengths only)"
    )
    build_demo_index: bool = Field(
        True, description="build the packaged demo index on start if missing"
    )

    @field_validator(
        "request_timeout_s",
        "max_queue_wait_s",
        "max_queue_wait_services",
        "quantization",
        "judge_quantization",
        "speculative",
        mode="before",
    )
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        """``RAGGUARD_MAX_QUEUE_WAIT_S=`` (empty) turns the bound off, as documented; "none"
        says the same (quantization and speculative decoding off, too)."""
        if isinstance(value, str) and value.strip().lower() in ("", "none"):
            return None
        return value

    def effective_system_prompt(self) -> str:
        """The rule the generator answers by: ``system_prompt``, else the model's default
        (resolved when asked, so a copy with another ``model`` gets that model's)."""
        return self.system_prompt if self.system_prompt.strip() else system_prompt_for(self.model)

    def resolved_judge_model(self) -> str | None:
        """The judge's model: None (off), "generator" (the generator's own engine) or a model
        for a second engine."""
        choice = (self.judge_model or "").strip()
        if not choice:
            return "generator" if self.model in JUDGE_BY_DEFAULT else None
        if choice.lower() in ("off", "none"):
            return None
        if choice == "generator" or choice == self.model:
            return "generator"
        return choice

    def keys_location(self) -> str | Path:
        """Where the API key store lives (``keys_db``, else ``data_dir/keys.sqlite``)."""
        return self.keys_db or self.data_dir / "keys.sqlite"

    def generator_backend(self, *, serving: bool = False) -> str:
        """The engine-client backend to build: ``auto`` is the engine in a process of its own
        for the API server (``serving``: its health checks measured 9 ms p99 under a 10x load
        against 1.8 s with the engine's thread in the server; docs/benchmarks.md), and the
        engine in a thread of the caller's process elsewhere (SDK, CLI, eval)."""
        if self.generator != "auto":
            return self.generator
        return "engine-process" if serving else "engine"

    def engine_config(self) -> EngineConfig:
        """The engine configuration these settings describe."""
        from engine import EngineConfig

        return EngineConfig(
            model=self.model,
            dtype=self.dtype,
            device=self.device,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            kv_cache_memory_bytes=self.kv_cache_memory_mb << 20,
            reserve_max_tokens=self.reserve_max_tokens,
            cuda_graphs=self.cuda_graphs,
            quantization=self.quantization,
            speculative=self.speculative,
            num_speculative_tokens=self.num_speculative_tokens,
            prompt_lookup_max=self.prompt_lookup_max,
            prompt_lookup_min=self.prompt_lookup_min,
            speculative_max_seqs=self.speculative_max_seqs,
            cache_dir=self.model_cache_dir,
            allow_hub=self.allow_hub,
            max_model_len=self.generator_max_model_len if self.generator == "openai" else None,
            process_nice=self.engine_process_nice,
        )

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

    @model_validator(mode="after")
    def _remote_needs_a_url(self) -> Settings:
        if self.generator == "openai" and not self.generator_url:
            raise ValueError("generator=openai needs generator_url (RAGGUARD_GENERATOR_URL)")
        if self.generator_url and not self.generator_url.startswith(("http://", "https://")):
            raise ValueError(f"generator_url must be http(s)://..., got {self.generator_url!r}")
        return self

    @field_validator("audit_rates")
    @classmethod
    def _rates_are_shares(cls, rates: dict[str, float]) -> dict[str, float]:
        bad = {k: v for k, v in rates.items() if not 0.0 <= v <= 1.0}
        if bad:
            raise ValueError(f"audit rates must be between 0 and 1: {bad}")
        return rates

    @model_validator(mode="after")
    def _judge_band(self) -> Settings:
        if self.judge_min_confidence > self.judge_max_confidence:
            raise ValueError(
                f"judge_min_confidence ({self.judge_min_confidence}) must not exceed "
                f"judge_max_confidence ({self.judge_max_confidence})"
            )
        return self

    @model_validator(mode="after")
    def _lookup_range(self) -> Settings:
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise ValueError(
                f"prompt_lookup_min ({self.prompt_lookup_min}) must not exceed "
                f"prompt_lookup_max ({self.prompt_lookup_max})"
            )
        return self

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_level(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value
