"""One question on its way through the stages (``Ask``), and its ``Result``, built once from it
when the question ends: short cut, reviewer's answer, or checked and decided."""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass, field

from guards import Action, Policy
from guards.review import CachedAnswer
from rag import citations, logs
from rag.prompt import NO_ANSWER
from rag.stages.check import Check, Checked, finish_reason
from rag.stages.decide import Judged
from rag.stages.generate import Generation
from rag.types import AskOptions, Passage, Result, Sample, Usage


@dataclass(slots=True)
class Ask:
    """One question on its way through the stages."""

    question: str
    options: AskOptions
    request_id: str
    index: str
    policy: Policy | None
    """The policy with the request's own thresholds (None: guards disabled)."""
    degrade: Collection[str] = ()
    """Work to skip under load (``rag.server.degrade.STEPS``)."""
    started: float = field(default_factory=time.perf_counter)
    timings: dict[str, float] = field(default_factory=dict)
    degraded: list[str] = field(default_factory=list)
    """The steps of ``degrade`` that did skip something for this answer."""

    def lap(self, name: str, since: float) -> None:
        self.timings[name] = time.perf_counter() - since

    def result(
        self,
        model: str,
        answer: str,
        passages: list[Passage],
        usage: Usage | None = None,
        *,
        abstain: str | None = None,
        decision: Action | None = None,
        reasons: list[str] | None = None,
        checked: Checked | None = None,
        samples: list[Sample] | None = None,
        verification: float | None = None,
        review_id: str | None = None,
    ) -> Result:
        """The question's ``Result`` (``model``: the generator's name), noted in its log record."""
        self.timings["total_s"] = time.perf_counter() - self.started
        if decision is None:
            decision = Action.ABSTAIN if abstain is not None else Action.ANSWER
        result = Result(
            question=self.question,
            answer=answer,
            citations=citations.attribute(answer, passages) if abstain is None else [],
            passages=passages,
            abstained=abstain is not None,
            abstain_reason=abstain,
            timings=dict(self.timings),
            usage=usage or Usage(),
            model=model,
            index=self.index,
            request_id=self.request_id,
            confidence=checked.confidence if checked is not None else None,
            decision=decision,
            decision_reasons=reasons if reasons is not None else ([abstain] if abstain else []),
            guard_results=checked.reports() if checked is not None else [],
            confidence_signals=checked.signals if checked is not None else {},
            samples=samples or [],
            verification=verification,
            judgement=checked.context.judgement
            if checked is not None and checked.context is not None
            else None,
            review_id=review_id,
            degraded=list(self.degraded),
        )
        logs.note(
            question=self.question,
            answer=answer,
            passages=len(passages),
            decision=decision.value,
            confidence=result.confidence,
            review_id=review_id,
            degraded=list(self.degraded),
            prompt_tokens=result.usage.prompt_tokens,
            completion_tokens=result.usage.completion_tokens,
        )
        return result

    def reviewed(self, model: str, reviewed: CachedAnswer, passages: list[Passage]) -> Result:
        """A reviewer's approved (or edited) answer to this question on this index version."""
        reason = f"approved by reviewer {reviewed.reviewer} (review {reviewed.review_id})"
        return self.result(
            model, reviewed.answer, passages, reasons=[reason], review_id=reviewed.review_id
        )

    def decided(
        self,
        model: str,
        answer: str,
        passages: list[Passage],
        generation: Generation,
        check: Check,
        judged: Judged,
    ) -> Result:
        """The checked answer as decided: withheld (``NO_ANSWER``, with the decision's reasons),
        sent to review, or answered; with every completion the guards looked at."""
        decision = judged.decision
        withheld = decision.action is Action.ABSTAIN
        return self.result(
            model,
            NO_ANSWER if withheld else answer,
            passages,
            generation.usage,
            abstain="; ".join(decision.reasons) if withheld else None,
            decision=decision.action,
            reasons=decision.reasons,
            checked=judged.checked,
            samples=[
                Sample(c.text.strip(), list(c.logprobs), finish_reason(c))
                for c in generation.completions
            ],
            verification=check.verification,
        )
