"""The judge's verdict: a judge model's P(yes) that the answer is correct and supported.

The probability is measured where the judge model is (``rag.stages.check.judge`` asks it, only for
answers in the cascade's uncertain band) and handed to the guards in ``GuardContext.judgement``;
this guard turns it into a verdict and a signal. Unjudged answers abstain: no judgement is not a
PASS.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import ClassVar

from guards.base import Guard, GuardContext, GuardResult, Outcome

MAX_LOGIT = 9.0
"""The judge's log-odds are clipped here (P(yes) of 0.9999): past it, rounding, not evidence."""


def judge_logit(p_yes: float) -> float:
    """log(p / (1 - p)), clipped to ±``MAX_LOGIT``: 0 means the judge is undecided."""
    p = min(max(p_yes, 1e-12), 1 - 1e-12)
    return max(-MAX_LOGIT, min(MAX_LOGIT, math.log(p / (1 - p))))


class JudgeGuard(Guard):
    """PASS when the judge says yes with at least ``min_p_yes``; score = P(yes); signal = its
    clipped log-odds (the confidence's second stage weighs it)."""

    name = "judge"
    signals: ClassVar[Mapping[str, int]] = {"judge": 1}

    def __init__(self, *, min_p_yes: float = 0.5):
        self.min_p_yes = min_p_yes

    def check(self, ctx: GuardContext) -> GuardResult:
        p = ctx.judgement
        if p is None:
            return self.abstain("the judge was not asked (confidence outside its band, or off)")
        outcome = Outcome.PASS if p >= self.min_p_yes else Outcome.FAIL
        reason = f"the judge model's P(yes) that the answer is correct and supported: {p:.2f}"
        return GuardResult(self.name, outcome, p, reason, {}, {"judge": judge_logit(p)})
