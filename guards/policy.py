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
    """Below ``abstain_below`` withhold; below ``review_below``, or on a hard failure, review.

    The confidence is looked at first: an answer the confidence model gives less than
    ``abstain_below`` is withheld even when a guard also failed, so reviewers see answers worth
    a person's time, not ones that are almost surely wrong. Above it, a FAIL of a guard in
    ``review_on_failure`` (a contradiction with the knowledge graph, passages that disagree on
    the answer, a looping answer) sends the answer to a person whatever the confidence.
    Thresholds: docs/benchmarks.md (risk-coverage on the development sets)."""

    abstain_below: float = 0.15
    review_below: float = 0.2
    review_on_failure: tuple[str, ...] = ("knowledge_graph", "evidence_conflict", "repetition")
    """Guards whose FAIL sends an answer above ``abstain_below`` to a person."""
    not_calibrated: str | None = None
    """Set when a risk was asked for and no threshold could be certified (``guards.risk``):
    nothing is answered automatically; what would have been answered goes to a person, with
    this reason (it starts ``not_calibrated``)."""
    threshold_note: str = ""
    """Where ``review_below`` came from, added to the reasons (e.g. the certified risk)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.abstain_below <= self.review_below <= 1.0:
            raise ValueError(
                "need 0 <= abstain_below <= review_below <= 1, "
                f"got {self.abstain_below}, {self.review_below}"
            )

    def decide(self, results: Sequence[GuardResult], confidence: float | None) -> Decision:
        failed = [f"{r.name}: {r.reason}" for r in results if r.outcome is Outcome.FAIL]
        if confidence is None:
            return Decision(Action.REVIEW, ["no confidence could be computed", *failed])
        if confidence < self.abstain_below:
            return Decision(
                Action.ABSTAIN, [f"confidence {confidence:.2f} < {self.abstain_below}", *failed]
            )
        hard = [
            f"{r.name}: {r.reason}"
            for r in results
            if r.outcome is Outcome.FAIL and r.name in self.review_on_failure
        ]
        if hard:
            soft = [f for f in failed if f not in hard]
            return Decision(Action.REVIEW, [*hard, f"confidence {confidence:.2f}", *soft])
        note = [self.threshold_note] if self.threshold_note else []
        if confidence < self.review_below:
            return Decision(
                Action.REVIEW,
                [f"confidence {confidence:.2f} < {self.review_below}", *note, *failed],
            )
        if self.not_calibrated is not None:
            return Decision(
                Action.REVIEW, [self.not_calibrated, f"confidence {confidence:.2f}", *failed]
            )
        return Decision(
            Action.ANSWER, [f"confidence {confidence:.2f} >= {self.review_below}", *note, *failed]
        )
