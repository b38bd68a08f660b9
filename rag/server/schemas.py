"""HTTP request and response bodies (pydantic lives here, at the edge only)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from rag.retrieval.collection import INDEX_NAME_PATTERN, IngestReport, check_index_name
from rag.retrieval.records import DocumentInfo, IndexInfo
from rag.settings import MAX_QUESTION_CHARS
from rag.types import AskOptions, Result, RetrievalMode

MAX_OFFSET = 2**31
"""The largest offset a listing takes: far past any listing's end, and far below SQLite's
largest integer (2**63 - 1), beyond which a query fails."""

IndexName = Annotated[
    str,
    Field(min_length=1, max_length=64, json_schema_extra={"pattern": INDEX_NAME_PATTERN}),
    AfterValidator(check_index_name),  # the pattern, refused with a message that explains it
]
"""An index name (letters, digits, '_', '.' or '-', starting with a letter or digit), in a body,
a query or a path."""


class StrictRequest(BaseModel):
    """A request body. Unknown fields are refused, and so are values of another type than the
    declared one (``"1"`` or ``false`` for a number, ``0`` for a boolean): they are not coerced.
    A JSON integer is a number; NaN and infinities (not JSON) are refused."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class AskRequest(StrictRequest):
    """A question for the grounded QA pipeline."""

    question: str = Field(
        ...,
        min_length=1,
        max_length=MAX_QUESTION_CHARS,
        description="the question; the server may set a lower limit (RAGGUARD_MAX_QUESTION_CHARS)",
        examples=["What does a KV cache avoid recomputing?"],
    )
    index: IndexName | None = Field(
        None, description="index to search; default: the server's RAGGUARD_INDEX_NAME"
    )
    top_k: int | None = Field(None, ge=1, le=50, description="passages to retrieve")
    min_score: float | None = Field(
        None, ge=-1.0, le=1.0, description="relevance threshold (cosine)"
    )
    retrieval: RetrievalMode | None = Field(
        None,
        description="dense, bm25 or hybrid (both fused by reciprocal rank); default: the "
        "server's RAGGUARD_RETRIEVAL",
    )
    max_tokens: int | None = Field(None, ge=1, le=4096, description="answer length limit")
    temperature: float | None = Field(None, ge=0.0, le=2.0, description="0 = greedy")
    seed: int | None = Field(
        None, ge=0, lt=2**63, description="sampling seed, for reproducible answers"
    )
    abstain_below: float | None = Field(
        None, ge=0.0, le=1.0, description="withhold the answer under this confidence"
    )
    review_below: float | None = Field(
        None, ge=0.0, le=1.0, description="send the answer to review under this confidence"
    )
    timeout_s: float | None = Field(
        None,
        gt=0.0,
        le=3600.0,
        description="deadline for the answer (default: the server's RAGGUARD_REQUEST_TIMEOUT_S); "
        "past it the generation stops and the answer is a 504",
    )
    stream: bool = Field(
        False,
        description="answer as server-sent events: passages, token deltas, then the result",
    )

    def to_options(self) -> AskOptions:
        return AskOptions(
            index=self.index,
            top_k=self.top_k,
            min_score=self.min_score,
            retrieval=self.retrieval,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            seed=self.seed,
            abstain_below=self.abstain_below,
            review_below=self.review_below,
            timeout_s=self.timeout_s,
        )


class PassageOut(BaseModel):
    doc_id: str
    chunk_id: str
    text: str
    score: float
    metadata: dict[str, Any]


class CitationOut(BaseModel):
    number: int = Field(..., description="the [n] marker; passages are numbered from 1")
    doc_id: str
    chunk_id: str
    text: str
    score: float
    method: str = Field(..., description="explicit (written by the model) or overlap (attributed)")


class GuardReportOut(BaseModel):
    name: str
    outcome: str = Field(..., description="pass, fail or abstain")
    score: float | None
    reason: str
    evidence: dict[str, Any]


class UsageOut(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int = Field(
        0, description="prompt tokens served from the engine's prefix cache"
    )


class AskResponse(BaseModel):
    """A grounded answer; the same fields as the SDK's ``Result``."""

    question: str
    answer: str
    citations: list[CitationOut]
    passages: list[PassageOut]
    abstained: bool
    abstain_reason: str | None
    timings: dict[str, float]
    usage: UsageOut
    model: str
    index: str
    request_id: str
    confidence: float | None = Field(None, description="probability that the answer is right")
    decision: str = Field(..., description="answer, abstain or review")
    decision_reasons: list[str]
    guard_results: list[GuardReportOut]
    review_id: str | None = Field(None, description="set when the answer awaits human review")
    confidence_signals: dict[str, float] = Field(
        default_factory=dict, description="the signals the confidence was computed from"
    )
    judgement: float | None = Field(
        None,
        description="the judge model's P(yes) that the answer is correct and supported, when "
        "the cascade asked it (first-stage confidence in the judge's band)",
    )
    cached_from: str | None = Field(
        None,
        description="served from the answer cache: the request id of the answer that went out "
        "first (same question, index content and settings, within the TTL)",
    )
    degraded: list[str] = Field(
        default_factory=list,
        description="work skipped because the server was loaded: 'samples' (no extra samples, "
        "so no self-consistency), 'judge' (no judge cascade); the confidence is computed from "
        "the signals the answer had",
    )

    @classmethod
    def from_result(cls, result: Result) -> AskResponse:
        return cls.model_validate(result.to_dict())


class DocumentIn(StrictRequest):
    """A document given as text."""

    doc_id: str = Field(
        ..., min_length=1, max_length=512, description="stable id; re-posting replaces"
    )
    text: str = Field(..., min_length=1)
    metadata: dict[str, Any] = Field(default_factory=dict)


class IngestResponse(BaseModel):
    index: str
    added: list[str]
    updated: list[str]
    skipped: list[str]
    num_chunks: int
    elapsed_s: float

    @classmethod
    def from_report(cls, index: str, report: IngestReport) -> IngestResponse:
        return cls(
            index=index,
            added=report.added,
            updated=report.updated,
            skipped=report.skipped,
            num_chunks=report.num_chunks,
            elapsed_s=report.elapsed_s,
        )


class DocumentOut(BaseModel):
    doc_id: str
    content_hash: str
    num_chunks: int
    metadata: dict[str, Any]
    ingested_at: float

    @classmethod
    def from_info(cls, info: DocumentInfo) -> DocumentOut:
        return cls(
            doc_id=info.doc_id,
            content_hash=info.content_hash,
            num_chunks=info.num_chunks,
            metadata=info.metadata,
            ingested_at=info.ingested_at,
        )


class DocumentList(BaseModel):
    index: str
    total: int
    offset: int
    limit: int
    documents: list[DocumentOut]


class IndexOut(BaseModel):
    name: str
    format_version: int
    embedding_model: str
    dimension: int
    index_type: str
    chunk_size: int
    chunk_overlap: int
    num_documents: int
    num_chunks: int
    generation: int
    created_at: float
    updated_at: float

    @classmethod
    def from_info(cls, info: IndexInfo) -> IndexOut:
        from dataclasses import asdict

        return cls.model_validate(asdict(info))


class ErrorOut(BaseModel):
    """Every error response: what went wrong, in words, and its kind."""

    detail: str | list[dict[str, Any]]
    error: str


class HealthOut(BaseModel):
    status: str


class ReadyOut(BaseModel):
    """Readiness; callers without a valid key (or, without keys, not local) get ``status`` only."""

    status: str
    model: str | None = None
    embedding_model: str | None = None
    indexes: list[str] | None = None
    error: str | None = None
