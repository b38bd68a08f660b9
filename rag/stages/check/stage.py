"""Check: self-verification (if on), the guards and the first-stage confidence, then, for an
answer whose confidence is in the judge's band, the judge's verdict and the second stage."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine import EngineError
from rag.stages.check.checker import AnswerChecker, Checked, candidate
from rag.stages.check.judge import Judge
from rag.stages.check.verification import SelfVerifier
from rag.stages.generate import Generation
from rag.types import Passage

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Check:
    """What the check stage hands on."""

    checked: Checked
    """The guards' results and the confidence (``first_stage`` set when the judge weighed in)."""
    verification: float | None
    """Self-verification's P(yes), when it ran and read one."""
    timings: dict[str, float] = field(default_factory=dict)
    """``verify_s``, ``guards_s`` and ``judge_s``, of the steps that ran."""
    judge_skipped: bool = False
    """The answer was in the judge's band but the judge was left out (``judge=False``)."""


class CheckStage:
    """The checker (``AnswerChecker``), with the self-verifier and the judge when they are on."""

    def __init__(
        self,
        checker: AnswerChecker,
        verifier: SelfVerifier | None = None,
        judge: Judge | None = None,
    ):
        self.checker = checker
        self.verifier = verifier
        self.judge = judge

    async def run(
        self,
        question: str,
        answer: str,
        passages: Sequence[Passage],
        generation: Generation,
        request_id: str,
        *,
        judge: bool = True,
    ) -> Check:
        """Check ``answer`` (the stripped text of ``generation``'s answer) against the
        ``passages`` its prompt showed. ``judge``: false skips the judge cascade (under load);
        the first-stage confidence then stands. A judge that fails leaves the answer unjudged."""
        shown = list(passages)
        timings: dict[str, float] = {}
        verification = None
        if self.verifier is not None:
            since = time.perf_counter()
            verification = await self.verifier.score(
                question, shown, answer, f"{request_id}-verify-{uuid.uuid4().hex[:8]}"
            )
            timings["verify_s"] = time.perf_counter() - since
        since = time.perf_counter()
        samples = [candidate(c) for c in generation.completions]
        checked = await asyncio.to_thread(
            self.checker.check, question, samples[0], samples, shown, verification=verification
        )
        timings["guards_s"] = time.perf_counter() - since
        if self.judge is None or not self.judge.should_judge(checked.confidence):
            return Check(checked, verification, timings)
        if not judge:
            return Check(checked, verification, timings, judge_skipped=True)
        since = time.perf_counter()
        try:
            judgement = await self.judge.score(
                question, shown, answer, f"{request_id}-judge-{uuid.uuid4().hex[:8]}"
            )
        except EngineError as exc:  # the answer stands, unjudged (its judge guard abstains)
            logger.warning("the judge failed (%s): the answer is left unjudged", exc)
            judgement = None
        timings["judge_s"] = time.perf_counter() - since
        if judgement is not None:
            checked = self.checker.judged(checked, judgement)
        return Check(checked, verification, timings)
