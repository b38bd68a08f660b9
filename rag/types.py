"""Data that flows between the pipeline's stages and out to users (SDK and HTTP alike)."""

from __future__ import annotations

from collections.abc import AsyncIterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from guards.policy import Action

RetrievalMode = Literal["dense", "bm25", "hybrid"]
"""How an index ranks chunks: by embedding, by BM25 over the words, or both fused."""
RETRIEVAL_MODES: tuple[RetrievalMode, ...] = ("dense", "bm25", "hybrid")


@dataclass(frozen=True, slots=True)
class AskOptions:
    """Per-question options; None falls back to the pipeline's settings."""

    index: str | None = None
    top_k: int | None = None
    min_score: float | None = None
    retrieval: RetrievalMode | None = None
    """dense, bm25 or hybrid (reciprocal rank fusion of both)."""
    max_tokens: int | None = None
    temperature: float | None = None
    seed: int | None = None
    abstain_below: float | None = None
    """Confidence under which this answer is withheld (overrides the policy's threshold)."""
    review_below: float | None = None
    """Confidence under which this answer goes to a reviewer (overrides the policy's)."""
    timeout_s: float | None = None
    """Deadline for the whole answer; past it the generation stops and
    ``DeadlineExceededError`` is raised (None: the settings' ``request_timeout_s``)."""


@dataclass(frozen=True, slots=True)
class Passage:
    """A retrieved chunk with its similarity to the question."""

    doc_id: str
    chunk_id: str
    text: str
    score: float
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Citation:
    """Answer marker ``[number]`` and the passage it points to."""

    number: int
    doc_id: str
    chunk_id: str
    text: str
    score: float
    method: str = "explicit"
    """"explicit" when the model wrote the marker, "overlap" when attributed by word overlap."""


@dataclass(frozen=True, slots=True)
class GuardReport:
    """One guard's result on the answer, as users see it (``guards.GuardResult`` made plain)."""

    name: str
    outcome: str
    """pass, fail or abstain."""
    score: float | None
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of the generation step."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0
    """Of the prompt tokens, those whose KV the engine's prefix cache already held."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One generated completion the guards looked at (the answer is the first)."""

    text: str
    token_logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None


@dataclass(frozen=True, slots=True)
class Result:
    """A grounded answer, what it rests on, and what it cost."""

    question: str
    answer: str
    citations: list[Citation]
    passages: list[Passage]
    """Every passage shown to the model, numbered from 1 in this order."""
    abstained: bool
    abstain_reason: str | None
    timings: dict[str, float]
    usage: Usage
    model: str
    index: str
    request_id: str
    confidence: float | None = None
    """Probability that the answer is right (calibrated when a fitted model is configured)."""
    decision: Action = Action.ANSWER
    """answer, abstain or review."""
    decision_reasons: list[str] = field(default_factory=list)
    guard_results: list[GuardReport] = field(default_factory=list)
    review_id: str | None = None
    """Set when the answer was queued for human review."""
    confidence_signals: dict[str, float] = field(default_factory=dict)
    """The features the confidence was computed from (``guards.confidence.FEATURES``)."""
    samples: list[Sample] = field(default_factory=list)
    """The answer and the extra samples as generated, with their token log-probabilities."""
    verification: float | None = None
    """The generator's P(yes) that its answer is correct (self-verification), if asked."""
    judgement: float | None = None
    """The judge model's P(yes) that the answer is correct and supported, if it was asked (the
    cascade asks only answers of uncertain first-stage confidence)."""
    cached_from: str | None = None
    """The id of the earlier answer this one was served from (the answer cache), if any."""
    degraded: list[str] = field(default_factory=list)
    """Work skipped because the server was loaded (``rag.server.degrade``: samples, judge)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Result:
        """Rebuild a Result from ``to_dict`` output (e.g. a JSON response body)."""
        return cls(
            question=data["question"],
            answer=data["answer"],
            citations=[Citation(**c) for c in data["citations"]],
            passages=[Passage(**p) for p in data["passages"]],
            abstained=data["abstained"],
            abstain_reason=data.get("abstain_reason"),
            timings=dict(data["timings"]),
            usage=Usage(**data["usage"]),
            model=data["model"],
            index=data["index"],
            request_id=data["request_id"],
            confidence=data.get("confidence"),
            decision=Action(data.get("decision", "answer")),
            decision_reasons=list(data.get("decision_reasons", [])),
            guard_results=[GuardReport(**g) for g in data.get("guard_results", [])],
            review_id=data.get("review_id"),
            confidence_signals=dict(data.get("confidence_signals", {})),
            samples=[Sample(**c) for c in data.get("samples", [])],
            verification=data.get("verification"),
            judgement=data.get("judgement"),
            cached_from=data.get("cached_from"),
            degraded=list(data.get("degraded", [])),
        )


@dataclass(frozen=True, slots=True)
class PassagesEvent:
    """First event of a streamed answer: the passages shown to the model."""

    passages: list[Passage]
    index: str


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """A piece of the answer's text, as generated (before the guards have looked at it)."""

    text: str


@dataclass(frozen=True, slots=True)
class ResultEvent:
    """Last event: the checked answer with citations, confidence, decision and review id."""

    result: Result


AskEvent = PassagesEvent | TokenEvent | ResultEvent


async def result_of(events: AsyncIterable[AskEvent]) -> Result:
    """The ``Result`` at the end of an answer's events (the others are passed over)."""
    async for event in events:
        if isinstance(event, ResultEvent):
            return event.result
    raise AssertionError("the answer's events ended without a result")
