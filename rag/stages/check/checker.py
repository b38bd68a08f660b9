"""The checker: runs the guards on a generated answer and scores its confidence (the first stage),
re-scores it with the judge's verdict (the second stage), and holds the configured policy that
the decide stage applies, with a request's own thresholds if it gave any (``policy_for``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from engine import DEFAULT_PROFILE, PROFILES, CompletionOutput
from guards import (
    Candidate,
    ConfidenceModel,
    Decision,
    GuardChain,
    GuardContext,
    GuardPassage,
    GuardResult,
    KnowledgeGraph,
    Policy,
    features,
)
from guards.confidence import judged_features
from guards.judge import JudgeGuard
from guards.registry import GuardDeps, UnknownGuardError, build_guards
from guards.repetition import LOOP_STOP_REASON
from rag.errors import InvalidInputError
from rag.retrieval.embed import Embedder
from rag.settings import Settings
from rag.types import AskOptions, GuardReport, Passage

logger = logging.getLogger(__name__)
DATA = Path(__file__).resolve().parents[2] / "data"
DEFAULT_CONFIDENCE_MODEL = DATA / "confidence.json"
"""Fitted on labelled development answers by ``benchmarks/judgement.py --write-model``."""


def shipped_confidence_path(model: str | None, *, judged: bool = False) -> Path:
    """The shipped fitted confidence for a generator profile (``confidence-<profile>.json``;
    SmolLM2's is ``confidence.json``), or its second stage for judged answers
    (``judged-<profile>.json``). The file may not exist: not every profile has one."""
    profile = model if model in PROFILES else DEFAULT_PROFILE
    if judged:
        return DATA / f"judged-{profile}.json"
    return (
        DEFAULT_CONFIDENCE_MODEL
        if profile == DEFAULT_PROFILE
        else DATA / f"confidence-{profile}.json"
    )


@dataclass(frozen=True, slots=True)
class Checked:
    """What the guards found and the confidence computed from it."""

    results: list[GuardResult]
    confidence: float
    signals: dict[str, float]
    """The confidence model's input features."""
    context: GuardContext | None = None
    """What the guards saw (the judge's second stage re-runs its guard on it)."""
    first_stage: float | None = None
    """The confidence before the judge weighed in, when it did."""
    shipped_confidence: float | None = None
    """Set once a collection's calibration replaced ``confidence``: the one the guards computed."""

    def reports(self) -> list[GuardReport]:
        return [
            GuardReport(r.name, r.outcome.value, r.score, r.reason, dict(r.evidence))
            for r in self.results
        ]


def finish_reason(c: CompletionOutput) -> str | None:
    if c.stop_reason == LOOP_STOP_REASON:
        return LOOP_STOP_REASON
    return c.finish_reason and str(c.finish_reason)


def candidate(c: CompletionOutput) -> Candidate:
    """A generated completion as the guards see it."""
    return Candidate(c.text.strip(), tuple(c.logprobs), finish_reason(c))


class AnswerChecker:
    """The guard chain, the confidence model and the policy configured by the settings."""

    def __init__(
        self, settings: Settings, embedder: Embedder, *, graph: KnowledgeGraph | None = None
    ):
        """``graph`` replaces the one the settings name (an application's own, already built)."""
        graph = graph or self._load_graph(settings)
        deps = GuardDeps(embedder=embedder, graph=graph)
        try:
            guards = build_guards(settings.guards.names, deps)
        except UnknownGuardError as exc:
            raise InvalidInputError(str(exc)) from exc
        self.chain = GuardChain(guards)
        # The second stage re-runs the judge guard alone, through a chain of its own: the same
        # error handling, signal check and audit record as every other guard run.
        judge = [g for g in guards if g.name == JudgeGuard.name]
        self.judge_chain = GuardChain(judge) if judge else None
        self.confidence = self._load_confidence(settings)
        self.judged_confidence = self._load_judged_confidence(settings)
        self.policy = Policy(
            abstain_below=self._threshold(settings, "abstain_below"),
            review_below=self._threshold(settings, "review_below"),
        )

    def judge_band(self, settings: Settings) -> tuple[float, float]:
        """The judge's band: the settings' when given, else the one the profile's confidence
        was fitted with (like the thresholds)."""
        return (
            self._threshold(settings, "judge_min_confidence"),
            self._threshold(settings, "judge_max_confidence"),
        )

    def _threshold(self, settings: Settings, name: str) -> float:
        """A policy threshold: the setting when it was given, else the one the shipped
        confidence of the generator's profile was fitted with (its ``notes``), else the
        setting's default. Thresholds belong to a confidence: a profile's differ."""
        given: float = settings.get(name)
        if settings.was_given(name) or settings.guards.confidence_model is not None:
            return given
        fitted = self.confidence.notes.get(name)
        return float(fitted) if isinstance(fitted, int | float) else given

    @staticmethod
    def _load_confidence(settings: Settings) -> ConfidenceModel:
        """The configured confidence model, else the shipped fitted default; the hand-set prior
        only when neither loads (a configured file that does not load is an error)."""
        if settings.guards.confidence_model is not None:
            return ConfidenceModel.load(settings.guards.confidence_model)
        shipped = shipped_confidence_path(settings.engine.model)
        if not shipped.is_file():
            logger.warning(
                "no confidence is fitted for model %s: using the SmolLM2 default",
                settings.engine.model,
            )
            shipped = DEFAULT_CONFIDENCE_MODEL
        try:
            return ConfidenceModel.load(shipped)
        except (OSError, ValueError, TypeError) as exc:
            logger.warning(
                "shipped confidence model %s did not load (%s): using the uncalibrated prior",
                shipped,
                exc,
            )
            return ConfidenceModel.prior()

    @staticmethod
    def _load_judged_confidence(settings: Settings) -> ConfidenceModel | None:
        """The second stage for judged answers: the configured file, else the profile's
        shipped one, else None (the judge's verdict is then shown but moves nothing)."""
        if settings.guards.judge_confidence_model is not None:
            return ConfidenceModel.load(settings.guards.judge_confidence_model)
        shipped = shipped_confidence_path(settings.engine.model, judged=True)
        if not shipped.is_file():
            return None
        try:
            return ConfidenceModel.load(shipped)
        except (OSError, ValueError, TypeError) as exc:
            logger.warning("shipped second stage %s did not load (%s): not used", shipped, exc)
            return None

    @property
    def has_judge_guard(self) -> bool:
        return self.judge_chain is not None

    @staticmethod
    def _load_graph(settings: Settings) -> KnowledgeGraph | None:
        path = settings.guards.knowledge_graph or DATA / "demo_kg.txt"
        aliases = settings.guards.knowledge_graph_aliases or (
            DATA / "demo_kg_aliases.txt" if settings.guards.knowledge_graph is None else None
        )
        if not path.is_file():
            logger.warning("knowledge graph %s not found: answers are not fact-checked", path)
            return None
        return KnowledgeGraph.from_file(path, aliases_path=aliases)

    def policy_for(self, options: AskOptions) -> Policy:
        """The configured policy with this request's thresholds, validated before any work."""
        if options.abstain_below is None and options.review_below is None:
            return self.policy
        try:
            return replace(
                self.policy,
                abstain_below=self.policy.abstain_below
                if options.abstain_below is None
                else options.abstain_below,
                review_below=self.policy.review_below
                if options.review_below is None
                else options.review_below,
            )
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from exc

    def check(
        self,
        question: str,
        answer: Candidate,
        samples: Sequence[Candidate],
        passages: Sequence[Passage],
        *,
        verification: float | None = None,
    ) -> Checked:
        """Run the guards on ``answer`` (``samples``: every completion, the answer first) and
        score the confidence."""
        ctx = GuardContext(
            question=question,
            answer=answer.text,
            passages=tuple(GuardPassage(p.chunk_id, p.text, p.score) for p in passages),
            candidates=tuple(samples),
            verification=verification,
        )
        results = list(self.chain.run(ctx).results)
        feats = features(
            results,
            token_logprobs=answer.token_logprobs,
            retrieval_score=max((p.score for p in passages), default=None),
        )
        return Checked(results, self.confidence.score(feats), feats, ctx)

    def judged(self, checked: Checked, judgement: float) -> Checked:
        """The second stage: the judge guard's verdict on ``judgement`` replaces its abstention,
        and the second-stage model (if one is fitted) re-scores the confidence from the first
        stage's and the judge's log-odds."""
        assert checked.context is not None and self.judge_chain is not None
        ctx = replace(checked.context, judgement=judgement)
        (verdict,) = self.judge_chain.run(ctx).results
        results = [verdict if r.name == JudgeGuard.name else r for r in checked.results]
        feats = {**checked.signals, **verdict.signals}
        confidence = checked.confidence
        if self.judged_confidence is not None and "judge" in verdict.signals:
            stage2 = judged_features(checked.confidence, verdict.signals["judge"])
            confidence = self.judged_confidence.score(stage2)
        return Checked(results, confidence, feats, ctx, first_stage=checked.confidence)

    def decide(self, checked: Checked, policy: Policy | None = None) -> Decision:
        """What to do with the checked answer: answer, abstain or review."""
        return (policy or self.policy).decide(checked.results, checked.confidence)
