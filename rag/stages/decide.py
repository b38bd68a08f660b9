"""Decide: the collection's calibrated confidence and certified threshold decide whether the
answer goes out, is withheld, or goes to a person.

The shipped confidence is what the guards computed; each collection's calibration in force
(``rag.review_desk.risk``) turns it into the confidence the user sees and the policy reads, and the
shipped one travels on (``Checked.shipped_confidence``), so that a verdict on the answer can
refit the calibration.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from guards import Decision, Policy
from rag.review_desk.risk import CollectionRisk, RiskControl
from rag.stages.check import Checked


@dataclass(frozen=True, slots=True)
class Judged:
    """What the decide stage hands on."""

    checked: Checked
    """With the collection's calibrated confidence (``shipped_confidence``: the guards' own)."""
    decision: Decision
    risk: CollectionRisk
    """The collection's risk control as it stood for this answer (one snapshot throughout)."""


class DecideStage:
    """The request's policy, held to each collection's risk control."""

    def __init__(self, risk: RiskControl):
        self.risk = risk

    def run(self, index: str, checked: Checked, policy: Policy, *, own: bool) -> Judged:
        """The calibrated confidence and the decision. ``policy``: the configured one with the
        request's thresholds; ``own``: the request set its own thresholds, which may be stricter
        than the collection's certified one, not looser."""
        state = self.risk.state(index)
        shipped = checked.confidence
        confidence = state.model.apply(shipped, checked.signals)
        checked = replace(checked, confidence=confidence, shipped_confidence=shipped)
        chosen = self.risk.policy(state, policy, own=own)
        return Judged(checked, chosen.decide(checked.results, checked.confidence), state)
