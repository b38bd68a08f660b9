"""Risk control learnt from labels: the confidence recalibrated per collection from reviewers'
verdicts (``Calibrator``), and the answer threshold chosen so that the error rate the user
accepts holds with the confidence they ask for (``choose_threshold``). Stands alone: numbers in,
numbers out; the review store keeps the labels and the versions."""

from guards.risk.bounds import binomial_upper_bound, min_labels_for
from guards.risk.calibrator import (
    CalibrationRule,
    Calibrator,
    Recalibration,
    RefitOutcome,
)
from guards.risk.labels import Label, LabelKind
from guards.risk.thresholds import RiskMode, RiskTarget, ThresholdChoice, choose_threshold

__all__ = [
    "CalibrationRule",
    "Calibrator",
    "Label",
    "LabelKind",
    "Recalibration",
    "RefitOutcome",
    "RiskMode",
    "RiskTarget",
    "ThresholdChoice",
    "binomial_upper_bound",
    "choose_threshold",
    "min_labels_for",
]
