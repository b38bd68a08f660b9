"""Runs the guards on a generated answer, scores its confidence and decides what to do with it."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.outputs import CompletionOutput
from guards import (
    Candidate,
    ConfidenceModel,
    Decision,
    Evidence,
    GuardChain,
    GuardContext,
    GuardResult,
    KnowledgeGraph,
    Policy,
    features,
)
from guards.registry import GuardDeps, UnknownGuardError, build_guards
from guards.repetition import LOOP_STOP_REASON
from guards.review import NewItem, ReviewStore
from rag.embed import Embedder
from rag.errors import InvalidInputError
from rag.reviews import open_review_store
from rag.settings import Settings
from rag.types import GuardVerdict, Passage

logger = logging.getLogger(__name__)
DATA = Path(__file__).resolve().parent / "data"
DEFAULT_CONFIDENCE_MODEL = DATA / "confidence.json"
"""Fitted on labelled development answers by ``benchmarks/judgement.py --write-model``."""


@dataclass(frozen=True, slots=True)
class Checked:
    results: list[GuardResult]
    confidence: float
    decision: Decision
    signals: dict[str, float]
    """The confidence model's input features."""

    def verdicts(self) -> list[GuardVerdict]:
        return [
            GuardVerdict(r.name, r.outcome.value, r.score, r.reason, dict(r.evidence))
            for r in self.results
        ]


def finish_reason(c: CompletionOutput) -> str | None:
    if c.stop_reason == LOOP_STOP_REASON:
        return LOOP_STOP_REASON
    return c.finish_reason and str(c.finish_reason)


class AnswerChecker:
    """The guard chain, the confidence model and the policy configured by the settings."""

    def __init__(
        self,
        settings: Settings,
        embedder: Embedder,
        reviews: ReviewStore | None = None,
        *,
        graph: KnowledgeGraph | None = None,
    ):
        """``reviews``: the queue flagged answers go to (the pipeline's); without one the
        checker opens its own connection to the store the settings name. ``graph`` replaces the
        one the settings name (an application's own, already built)."""
        graph = graph or self._load_graph(settings)
        try:
            guards = build_guards(settings.guards, GuardDeps(embedder=embedder, graph=graph))
        except UnknownGuardError as exc:
            raise InvalidInputError(str(exc)) from exc
        self.chain = GuardChain(guards)
        self.confidence = self._load_confidence(settings)
        self.policy = Policy(
            abstain_below=settings.abstain_below, review_below=settings.review_below
        )
        self._owns_reviews = reviews is None
        self.reviews = reviews if reviews is not None else open_review_store(settings)

    def close(self) -> None:
        """Close the review store if this checker opened it (a given one stays open)."""
        if self._owns_reviews:
            self.reviews.close()

    @staticmethod
    def _load_confidence(settings: Settings) -> ConfidenceModel:
        """The configured confidence model, else the shipped fitted default; the hand-set prior
        only when neither loads (a configured file that does not load is an error)."""
        if settings.confidence_model is not None:
            return ConfidenceModel.load(settings.confidence_model)
        try:
            return ConfidenceModel.load(DEFAULT_CONFIDENCE_MODEL)
        except (OSError, ValueError, TypeError) as exc:
            logger.warning(
                "shipped confidence model %s did not load (%s): using the uncalibrated prior",
                DEFAULT_CONFIDENCE_MODEL,
                exc,
            )
            return ConfidenceModel.prior()

    @staticmethod
    def _load_graph(settings: Settings) -> KnowledgeGraph | None:
        path = settings.knowledge_graph or DATA / "demo_kg.txt"
        aliases = settings.knowledge_graph_aliases or (
            DATA / "demo_kg_aliases.txt" if settings.knowledge_graph is None else None
        )
        if not path.is_file():
            logger.warning("knowledge graph %s not found: answers are not fact-checked", path)
            return None
        return KnowledgeGraph.from_file(path, aliases_path=aliases)

    def check(
        self,
        question: str,
        answer: CompletionOutput,
        candidates: list[CompletionOutput],
        passages: list[Passage],
        *,
        policy: Policy | None = None,
        verification: float | None = None,
    ) -> Checked:
        """Run the guards and decide; ``policy`` replaces the configured one for this answer."""
        ctx = GuardContext(
            question=question,
            answer=answer.text.strip(),
            passages=tuple(Evidence(p.chunk_id, p.text, p.score) for p in passages),
            candidates=tuple(
                Candidate(c.text.strip(), tuple(c.logprobs), finish_reason(c)) for c in candidates
            ),
            verification=verification,
        )
        results = list(self.chain.run(ctx).results)
        feats = features(
            results,
            token_logprobs=answer.logprobs,
            retrieval_score=max((p.score for p in passages), default=None),
        )
        confidence = self.confidence.score(feats)
        decision = (policy or self.policy).decide(results, confidence)
        return Checked(results, confidence, decision, feats)

    def queue_for_review(
        self,
        question: str,
        answer: str,
        checked: Checked,
        passages: list[Passage],
        *,
        candidates: list[str] | None = None,
        index_name: str = "",
        index_version: str = "",
        request_id: str = "",
    ) -> str:
        """Queue the answer for a person, with everything they need to judge it; its id."""
        item = self.reviews.add(
            NewItem(
                question=question,
                answer=answer,
                candidates=candidates or [],
                passages=[asdict(p) for p in passages],
                guard_results=[asdict(v) for v in checked.verdicts()],
                confidence=checked.confidence,
                reasons=list(checked.decision.reasons),
                index_name=index_name,
                index_version=index_version,
                request_id=request_id,
            )
        )
        return item.id
