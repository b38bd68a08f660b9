"""Policy: turn guard results and a confidence into ANSWER, ABSTAIN or REVIEW, with reasons.

The checks only observe; this is the one place that decides, with thresholds a deployment sets.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from guards.base import GuardResult, Outcome


class Action(enum.StrEnum):
    ANSWER = "answer"
    ABSTAIN = "abstain"
    REVIEW = "review"


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    reasons: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Policy:
    """Below ``abstain_below`` abstain; below ``review_below`` (or on a hard failure) review.

    The defaults come from ``benchmarks/guards_eval.py``: on HaluEval the prior confidence's
    review flag has F1 0.835 at 0.7 against 0.718 at 0.5 (docs/benchmarks.md)."""

    abstain_below: float = 0.2
    review_below: float = 0.7
    review_on_failure: tuple[str, ...] = ("knowledge_graph", "repetition", "grounding")
    """Guards whose FAIL sends the answer to a person whatever the confidence."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.abstain_below <= self.review_below <= 1.0:
            raise ValueError(
                "need 0 <= abstain_below <= review_below <= 1, "
                f"got {self.abstain_below}, {self.review_below}"
            )

    def decide(self, results: Sequence[GuardResult], confidence: float | None) -> Decision:
        hard = [
            r for r in results if r.outcome is Outcome.FAIL and r.name in self.review_on_failure
        ]
        if hard:
            return Decision(Action.REVIEW, [f"{r.name}: {r.reason}" for r in hard])
        if confidence is None:
            return Decision(Action.REVIEW, ["no confidence could be computed"])
        failed = [f"{r.name}: {r.reason}" for r in results if r.outcome is Outcome.FAIL]
        if confidence < self.abstain_below:
            return Decision(
                Action.ABSTAIN, [f"confidence {confidence:.2f} < {self.abstain_below}", *failed]
            )
        if confidence < self.review_below:
            return Decision(
                Action.REVIEW, [f"confidence {confidence:.2f} < {self.review_below}", *failed]
            )
        return Decision(
            Action.ANSWER, [f"confidence {confidence:.2f} >= {self.review_below}", *failed]
        )
