"""``Label``: one verdict on one delivered-or-flagged answer, as the calibrator and the threshold
rule read it."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field


class LabelKind(enum.StrEnum):
    """Where a label came from. Reviewer labels (``flagged``, ``audit``) are what the judgement
    learns from; end-user ``feedback`` is kept apart as a weak label and never fitted."""

    FLAGGED = "flagged"
    """A reviewer's verdict on an answer the policy sent to a person."""
    AUDIT = "audit"
    """A reviewer's verdict on an answer drawn at the audit rate, whatever the policy decided."""
    FEEDBACK = "feedback"
    """An end user's thumbs up or down."""


@dataclass(frozen=True, slots=True)
class Label:
    """Was this answer right? With what the judgement saw when it was given.

    ``confidence`` is the *shipped* confidence (before any per-collection calibration), so that
    every version of the calibration is fitted on the same inputs. ``propensity`` is the
    probability with which the answer was sent to a reviewer (1 for flagged answers, the audit
    rate for audited ones): each label weighs ``1 / propensity`` in estimates (inverse-propensity
    weighting), so that the few audited answers stand for all the answers that went out."""

    correct: bool
    confidence: float
    signals: Mapping[str, float] = field(default_factory=dict)
    propensity: float = 1.0
    kind: LabelKind = LabelKind.FLAGGED
    id: str = ""
    created_at: float = 0.0
    uniform: bool = False
    """Sent to a reviewer independently of its confidence (an audit draw, or any answer while
    no threshold was in force): the labels with this set are a uniform sample of the questions,
    and only they certify a risk threshold (exact Clopper-Pearson, no weights needed)."""
    drawn_at: float = 0.0
    """When the answer was queued for a reviewer (``created_at``: when the verdict came)."""

    def __post_init__(self) -> None:
        if not 0.0 < self.propensity <= 1.0:
            raise ValueError(f"a label's propensity must be in (0, 1], got {self.propensity}")
        if not 0.0 <= self.confidence <= 1.0:
            raise ValueError(f"a label's confidence must be in [0, 1], got {self.confidence}")

    @property
    def weight(self) -> float:
        return 1.0 / self.propensity
