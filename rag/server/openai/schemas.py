"""Request and response bodies of the OpenAI-compatible API (``/v1/models``,
``/v1/completions``, ``/v1/chat/completions``), shaped as OpenAI's so that its clients work.

Fields that OpenAI defines and ragguard cannot honour are refused with a 400, not ignored;
unknown fields are ignored (clients send many). Values of another type than the declared one are
refused, not coerced (a JSON integer is a number); the stated ranges are the engine's. The
grounded model, ``ragguard``, takes the options of ``/v1/ask`` as extra body fields
(``extra_body={"index": ..., "top_k": ...}`` in the ``openai`` package).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rag.server.schemas import CitationOut, GuardReportOut, IndexName, PassageOut
from rag.types import RetrievalMode

GROUNDED_MODEL = "ragguard"
"""The model id that answers from the index, with citations and the guards' decision."""


# ------------------------------------------------------------------ errors
class OpenAIErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIErrorOut(BaseModel):
    """Every error of these routes: ``{"error": {"message", "type", "param", "code"}}``."""

    error: OpenAIErrorDetail


# ------------------------------------------------------------------ models
class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "ragguard"
    max_model_len: int | None = Field(
        None, description="context window in tokens (as vLLM reports it)"
    )


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


# ---------------------------------------------------------------- requests
MAX_COMPLETION_TOKENS = 32768
"""The engine's limit on one completion's length (``SamplingParams``)."""

StopString = Annotated[str, Field(min_length=1)]
Penalty = Annotated[float, Field(ge=-2.0, le=2.0)]


class OpenAIRequest(BaseModel):
    """A request body of these routes: unknown fields are ignored (OpenAI's clients send many),
    values of another type are refused, not coerced; NaN and infinities are refused."""

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)


class StreamOptions(OpenAIRequest):
    include_usage: bool = False


class GenerationRequest(OpenAIRequest):
    """What completions and chat completions share, plus the grounded model's options."""

    model: str = Field(..., description=f"the loaded model's id, or {GROUNDED_MODEL!r}")
    n: int = Field(1, ge=1, le=64, description="completions per prompt (the grounded model: 1)")
    temperature: float | None = Field(
        None,
        ge=0.0,
        le=5.0,
        description="0 = greedy; default 1 (the grounded model: the server's setting)",
    )
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="nucleus sampling; default 1")
    max_tokens: int | None = Field(
        None, ge=1, le=MAX_COMPLETION_TOKENS, description="completion length limit in tokens"
    )
    stop: StopString | list[StopString] | None = Field(
        None, description="strings that end a completion"
    )
    seed: int | None = Field(
        None, ge=0, lt=2**63, description="sampling seed, for reproducible completions"
    )
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    stream: bool = Field(False, description="answer as server-sent events, ending in [DONE]")
    stream_options: StreamOptions | None = None
    user: str | None = Field(None, description="accepted and ignored")
    logit_bias: dict[str, float] | None = Field(None, description="not supported when non-empty")
    ignore_eos: bool = Field(
        False, description="keep generating past the end-of-text token (as vLLM's extension)"
    )

    # The grounded model's options (extra body fields, as in /v1/ask).
    index: IndexName | None = Field(None, description="grounded: the index to search")
    top_k: int | None = Field(None, ge=1, le=50, description="grounded: passages to retrieve")
    min_score: float | None = Field(
        None, ge=-1.0, le=1.0, description="grounded: relevance threshold (cosine)"
    )
    retrieval: RetrievalMode | None = Field(
        None, description="grounded: dense, bm25 or hybrid retrieval"
    )
    abstain_below: float | None = Field(
        None, ge=0.0, le=1.0, description="grounded: withhold the answer under this confidence"
    )
    review_below: float | None = Field(
        None, ge=0.0, le=1.0, description="grounded: queue the answer for review under this"
    )
    timeout_s: float | None = Field(
        None, gt=0.0, le=3600.0, description="grounded: deadline for the answer, in seconds"
    )

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    @property
    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class ContentPart(OpenAIRequest):
    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None


class ChatMessage(OpenAIRequest):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None


class ChatCompletionRequest(GenerationRequest):
    messages: list[ChatMessage] = Field(..., min_length=1)
    max_completion_tokens: int | None = Field(
        None,
        ge=1,
        le=MAX_COMPLETION_TOKENS,
        description="completion length limit in tokens (wins over max_tokens)",
    )
    logprobs: bool = Field(False, description="return the chosen tokens' log-probabilities")
    top_logprobs: int | None = Field(
        None, ge=0, le=20, description="also the most likely alternatives (needs logprobs)"
    )
    tools: list[dict[str, Any]] | None = Field(None, description="not supported when non-empty")


class CompletionRequest(GenerationRequest):
    prompt: str | Annotated[list[str], Field(min_length=1)] = Field(
        ..., description="a prompt, or a list of prompts"
    )
    logprobs: int | None = Field(
        None, ge=0, le=20, description="log-probabilities of the chosen and this many top tokens"
    )
    echo: bool = Field(False, description="not supported")
    suffix: str | None = Field(None, description="not supported")
    best_of: int | None = Field(None, ge=1, le=64, description="only equal to n is supported")

    @property
    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)


# --------------------------------------------------------------- responses
class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0
    """Prompt tokens served from the prefix cache."""


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChatLogprobs(BaseModel):
    content: list[TokenLogprob]


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]] | None = None
    text_offset: list[int]


class Grounding(BaseModel):
    """The extra ``ragguard`` field of a grounded answer: what the answer rests on and what the
    guards decided (the fields of ``/v1/ask``'s answer)."""

    answer: str = Field(..., description='the checked answer ("I don\'t know." when withheld)')
    citations: list[CitationOut]
    passages: list[PassageOut]
    confidence: float | None
    decision: str = Field(..., description="answer, abstain or review")
    decision_reasons: list[str]
    guard_results: list[GuardReportOut]
    review_id: str | None
    abstained: bool
    abstain_reason: str | None
    index: str
    request_id: str
    cached_from: str | None = Field(
        None, description="served from the answer cache: the id of the answer that went out first"
    )
    degraded: list[str] = Field(
        default_factory=list,
        description="work skipped under load (samples, judge); the confidence is computed "
        "without it",
    )


class ChatMessageOut(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int
    message: ChatMessageOut
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    ragguard: Grounding | None = Field(None, description="grounded model only")


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage
    ragguard: Grounding | None = Field(None, description="grounded model only")


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChatChunkChoice(BaseModel):
    index: int
    delta: Delta
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
    ragguard: Grounding | None = None


class CompletionChunk(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    ragguard: Grounding | None = None
