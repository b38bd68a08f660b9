"""Self-verification: the generator's own P(yes) that its answer is correct and supported.

The probability is measured where the generator is (``rag.stages.check.verification`` asks it on
the shared prompt prefix) and handed to the guards in ``GuardContext.verification``; this guard
turns it into a verdict and a signal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from guards.base import Guard, GuardContext, GuardResult, Outcome


class SelfVerificationGuard(Guard):
    """PASS when the generator says yes with at least ``min_p_true``; score = P(yes)."""

    name = "self_verification"
    signals: ClassVar[Mapping[str, int]] = {"p_true": 1}

    def __init__(self, *, min_p_true: float = 0.5):
        self.min_p_true = min_p_true

    def check(self, ctx: GuardContext) -> GuardResult:
        p = ctx.verification
        if p is None:
            return self.abstain("the generator was not asked to verify its answer")
        outcome = Outcome.PASS if p >= self.min_p_true else Outcome.FAIL
        reason = f"the generator says its answer is supported with P(yes) {p:.2f}"
        return GuardResult(self.name, outcome, p, reason, {}, {"p_true": p - 0.5})
