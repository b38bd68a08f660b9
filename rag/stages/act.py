"""Act: the decided answer is queued for review, sampled for an audit, and recorded so its user can
give feedback on it.

A flagged answer (``Action.REVIEW``) goes to a person; every checked answer is also drawn for an
audit at the collection's rate, and reviewed outright while nothing is answered automatically.
The queued items carry the guards' own confidence (``shipped_confidence``), which the verdict on
them refits the collection's calibration from (``rag.review_desk.risk``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict, replace

from sqlalchemy.exc import SQLAlchemyError

from guards import Action
from guards.review import NewItem, ReviewError
from guards.review.labels import AnswerRecord
from rag.review_desk import ReviewDesk
from rag.review_desk.risk import RiskControl
from rag.stages.decide import Judged
from rag.types import Result

logger = logging.getLogger(__name__)


class ActStage:
    """The review queue (``ReviewDesk``'s store) and the risk control's audit draws."""

    def __init__(self, reviews: ReviewDesk, risk: RiskControl):
        self.reviews = reviews
        self.risk = risk

    async def run(self, result: Result, version: str, judged: Judged) -> Result:
        """Queue what needs a person, audit a sample of what goes out, record the answer.
        Shielded: once written, a caller leaving does not half-finish it."""
        return await asyncio.shield(asyncio.to_thread(self._act, result, version, judged))

    def _act(self, result: Result, version: str, judged: Judged) -> Result:
        """A flagged answer goes to a person; every checked answer is also drawn for an audit
        at the collection's rate (so the audited ones are a uniform sample), and while nothing
        is answered automatically every one of them is reviewed (uniform too)."""
        shipped = judged.checked.shipped_confidence
        drawn = self.risk.draw_audit(result.index)
        cold = judged.risk.is_cold
        review_id: str | None = None
        if result.decision is Action.REVIEW:
            review_id = self._queue(result, version, shipped, "flagged", 1.0, drawn or cold)
            result = replace(result, review_id=review_id)
        elif drawn is not None or cold:
            # Audited: the user gets the answer (or the abstention) as decided. An audit item
            # that cannot be written costs a label, not the answer.
            propensity = 1.0 if cold else float(drawn or 1.0)
            try:
                audit_id = self._queue(result, version, shipped, "audit", propensity, True)
                logger.info("answer %s audited as review item %s", result.request_id, audit_id)
            except (ReviewError, SQLAlchemyError) as exc:
                logger.warning("answer %s: no audit item written (%s)", result.request_id, exc)
        if result.decision is Action.ABSTAIN:
            return result
        try:
            self._record(result, shipped, review_id)
        except (ReviewError, SQLAlchemyError) as exc:  # feedback on it will be a 404, no more
            logger.warning("answer %s was not recorded for feedback (%s)", result.request_id, exc)
        return result

    def _record(self, result: Result, shipped: float | None, review_id: str | None) -> None:
        self.reviews.store.labels.record_answer(
            AnswerRecord(
                result.request_id,
                result.index,
                self.risk.profile,
                result.question,
                result.decision.value,
                result.confidence,
                shipped,
                dict(result.confidence_signals),
                review_id,
            )
        )

    def _queue(
        self,
        result: Result,
        version: str,
        shipped: float | None,
        kind: str,
        propensity: float,
        uniform: object,
    ) -> str:
        item = self.reviews.store.add(
            NewItem(
                question=result.question,
                answer=result.answer,
                candidates=[s.text for s in result.samples],
                passages=[asdict(p) for p in result.passages],
                guard_results=[asdict(v) for v in result.guard_results],
                confidence=result.confidence,
                reasons=list(result.decision_reasons),
                index_name=result.index,
                index_version=version,
                request_id=result.request_id,
                kind=kind,
                propensity=propensity,
                uniform=bool(uniform),
                signals=dict(result.confidence_signals),
                shipped_confidence=shipped,
                profile=self.risk.profile,
            )
        )
        return item.id
