"""Decision settings: thresholds, risk control learnt from reviewers, audits, calibration."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from rag.settings.base import Group


class PolicySettings(Group):
    """The decision: thresholds, the risk learnt from reviewers, audits and calibration."""

    abstain_below: float = Field(
        0.15, ge=0.0, le=1.0, description="withhold under this confidence (docs/benchmarks.md)"
    )
    review_below: float = Field(
        0.2, ge=0.0, le=1.0, description="send to review under this (docs/benchmarks.md)"
    )
    target_risk: float | None = Field(
        None,
        gt=0.0,
        lt=1.0,
        description="the error rate you accept, e.g. 0.05: each collection's answer threshold "
        "is chosen from its labels to keep it (empty: the fixed thresholds)",
    )
    risk_confidence: float = Field(
        0.9, gt=0.0, lt=1.0, description="how sure the threshold must be of target_risk"
    )
    risk_mode: Literal["selective", "conformal"] = Field(
        "selective",
        description="selective: wrong answers among answered questions; conformal: wrong "
        "answers delivered among all questions",
    )
    audit_rate: float = Field(
        0.05,
        ge=0.0,
        le=1.0,
        description="share of answers that go out which are also queued for review as audit "
        "items (unbiased labels)",
    )
    audit_rates: dict[str, float] = Field(
        default_factory=dict,
        description='per-collection audit rates, JSON: {"docs": 0.1}',
    )
    audit_seed: int | None = Field(None, description="seed of the audit draw (tests)")
    calibrate_every: int = Field(
        25, ge=0, description="refit a collection's confidence after this many new labels (0: off)"
    )
    calibration_refresh_s: float = Field(
        5.0, gt=0, description="how often a server rereads a collection's calibration and labels"
    )

    @field_validator("audit_rates")
    @classmethod
    def _rates_are_shares(cls, rates: dict[str, float]) -> dict[str, float]:
        bad = {k: v for k, v in rates.items() if not 0.0 <= v <= 1.0}
        if bad:
            raise ValueError(f"audit rates must be between 0 and 1: {bad}")
        return rates
