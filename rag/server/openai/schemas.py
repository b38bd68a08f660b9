"""Request and response bodies of the OpenAI-compatible API (``/v1/models``,
``/v1/completions``, ``/v1/chat/completions``), shaped as OpenAI's so that its clients work.

Fields that OpenAI defines and ragguard cannot honour are refused with a 400, not ignored;
unknown fields are ignored (clients send many). The grounded model, ``ragguard``, takes the
options of ``/v1/ask`` as extra body fields (``extra_body={"index": ..., "top_k": ...}`` in the
``openai`` package).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rag.server.schemas import CitationOut, GuardVerdictOut, PassageOut

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


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


# ---------------------------------------------------------------- requests
class StreamOptions(BaseModel):
    include_usage: bool = False


class GenerationRequest(BaseModel):
    """What completions and chat completions share, plus the grounded model's options."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(..., description=f"the loaded model's id, or {GROUNDED_MODEL!r}")
    n: int = Field(1, description="completions per prompt (the grounded model: 1)")
    temperature: float | None = Field(
        None, description="0 = greedy; default 1 (the grounded model: the server's setting)"
    )
    top_p: float | None = Field(None, description="nucleus sampling; default 1")
    max_tokens: int | None = Field(None, description="completion length limit in tokens")
    stop: str | list[str] | None = Field(None, description="strings that end a completion")
    seed: int | None = Field(None, description="sampling seed, for reproducible completions")
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    stream: bool = Field(False, description="answer as server-sent events, ending in [DONE]")
    stream_options: StreamOptions | None = None
    user: str | None = Field(None, description="accepted and ignored")
    logit_bias: dict[str, float] | None = Field(None, description="not supported when non-empty")

    # The grounded model's options (extra body fields, as in /v1/ask).
    index: str | None = Field(None, description="grounded: the index to search")
    top_k: int | None = Field(None, ge=1, le=50, description="grounded: passages to retrieve")
    min_score: float | None = Field(
        None, ge=-1.0, le=1.0, description="grounded: relevance threshold (cosine)"
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


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None


class ChatCompletionRequest(GenerationRequest):
    messages: list[ChatMessage] = Field(..., min_length=1)
    max_completion_tokens: int | None = Field(
        None, description="completion length limit in tokens (wins over max_tokens)"
    )
    logprobs: bool = Field(False, description="return the chosen tokens' log-probabilities")
    top_logprobs: int | None = Field(
        None, ge=0, le=20, description="also the most likely alternatives (needs logprobs)"
    )
    tools: list[dict[str, Any]] | None = Field(None, description="not supported when non-empty")


class CompletionRequest(GenerationRequest):
    prompt: str | list[str] = Field(..., description="a prompt, or a list of prompts")
    logprobs: int | None = Field(
        None, ge=0, le=20, description="log-probabilities of the chosen and this many top tokens"
    )
    echo: bool = Field(False, description="not supported")
    suffix: str | None = Field(None, description="not supported")
    best_of: int | None = Field(None, description="only equal to n is supported")

    @property
    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)


# --------------------------------------------------------------- responses
class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


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
    guard_results: list[GuardVerdictOut]
    review_id: str | None
    abstained: bool
    abstain_reason: str | None
    index: str
    request_id: str


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
