"""Risk control per collection: the calibration in force, the certified answer threshold for the
risk the settings ask for, the audit draw, and the background refit after every N new labels.

One ``RiskControl`` per pipeline. It rereads each collection's version in force and its labels
at most every ``calibration_refresh_s`` (so servers sharing one review database converge on the
same version), and when ``calibrate_every`` labels have arrived since the version in force was
fitted it refits in a background thread: the new version is written, and swapped in only when
the calibrator accepts it (``guards.risk.Calibrator.refit``).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from engine import DEFAULT_PROFILE, PROFILES
from guards import Policy
from guards.review import ItemNotFoundError, ReviewStore
from guards.review.calibrations import CalibrationVersion
from guards.review.labels import LabelCounts
from guards.risk import Calibrator, Label, Recalibration, RiskMode, RiskTarget, ThresholdChoice
from guards.risk.calibrator import evaluate
from guards.risk.thresholds import certify_at_checkpoint as certify
from rag.settings import Settings

logger = logging.getLogger(__name__)


def profile_of(settings: Settings) -> str:
    """The generator profile labels are kept under: a profile name, else the model's file name
    (a remote generator: its model name)."""
    if settings.engine.generator == "openai":
        return f"openai:{settings.engine.generator_model or 'default'}"
    if settings.engine.model is None:
        return DEFAULT_PROFILE
    if settings.engine.model in PROFILES:
        return settings.engine.model
    return Path(settings.engine.model).name


@dataclass(frozen=True, slots=True)
class CollectionRisk:
    """What one collection's judgement rests on right now."""

    index: str
    profile: str
    model: Recalibration
    """The calibration in force (version 0: the shipped confidence as is)."""
    counts: LabelCounts
    choice: ThresholdChoice | None
    """The certified threshold for the target risk (None: no target risk is set)."""
    audit_rate: float
    read_at: float
    refit_from: int = 0
    """Labels there were at the newest refit, accepted or refused (the next is due from it)."""
    waiting_since: float | None = None
    """When the oldest uniform draw still waiting for a verdict was queued."""

    @property
    def is_cold(self) -> bool:
        """A target risk with no certified threshold: every checked answer goes to a person,
        and so every label is a uniform one."""
        return self.choice is not None and self.choice.threshold is None

    @property
    def version(self) -> int:
        return self.model.version

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "index": self.index,
            "profile": self.profile,
            "calibration_version": self.model.version,
            "calibration_stage": self.model.stage,
            "calibrated_on": self.model.labels,
            "labels_at_refit": self.model.seen,
            "labels": self.counts.reviewed,
            "flagged_labels": self.counts.flagged,
            "audit_labels": self.counts.audit,
            "uniform_labels": self.counts.uniform,
            "feedback_helpful": self.counts.helpful,
            "feedback_unhelpful": self.counts.unhelpful,
            "audit_rate": self.audit_rate,
        }
        if self.choice is not None:
            out.update(self.choice.as_dict())
        return out


@dataclass(frozen=True, slots=True)
class RefitReport:
    """What ``RiskControl.refit`` did, with the figures before and after."""

    index: str
    profile: str
    labels: int
    accepted: bool
    version: int
    """The version written (in force when accepted)."""
    reason: str
    before: Mapping[str, float]
    after: Mapping[str, float]
    seconds: float


class RiskControl:
    """The per-collection calibration and thresholds of one pipeline (see the module)."""

    def __init__(self, store: ReviewStore, settings: Settings, *, background: bool = True):
        self.store = store
        self.settings = settings
        self.profile = profile_of(settings)
        self.target = (
            RiskTarget(
                settings.policy.target_risk,
                settings.policy.risk_confidence,
                RiskMode(settings.policy.risk_mode),
            )
            if settings.policy.target_risk is not None
            else None
        )
        self.calibrator = Calibrator()
        self._rng = random.Random(settings.policy.audit_seed)
        self._cache: dict[str, CollectionRisk] = {}
        self._lock = threading.Lock()
        self._refits: dict[str, Future[RefitReport | None]] = {}
        self._executor = ThreadPoolExecutor(1, "ragguard-calibrate") if background else None

    # ------------------------------------------------------------ the judgement
    def state(self, index: str, *, fresh: bool = False) -> CollectionRisk:
        """The collection's calibration, labels and threshold (reread when stale)."""
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(index)
        fresh_enough = cached is not None and (
            now - cached.read_at < self.settings.policy.calibration_refresh_s
        )
        if cached is not None and fresh_enough and not fresh:
            return cached
        state = self._read(index, now)
        with self._lock:
            self._cache[index] = state
        self._maybe_refit(state)
        return state

    def audit_rate(self, index: str) -> float:
        return self.settings.policy.audit_rates.get(index, self.settings.policy.audit_rate)

    def _read(self, index: str, now: float) -> CollectionRisk:
        version = self.store.calibrations.in_force(index, self.profile)
        model = version.model if version is not None else Recalibration()
        newest = self.store.calibrations.newest(index, self.profile)
        labels = self.calibrator.fittable(self.store.labels.labels(index, self.profile))
        waiting = self.store.labels.first_waiting_draw(index, self.profile)
        counts = next(
            (
                c
                for c in self.store.labels.counts()
                if (c.index_name, c.profile) == (index, self.profile)
            ),
            LabelCounts(index, self.profile),
        )
        choice = self._certify(model, labels, waiting) if self.target is not None else None
        return CollectionRisk(
            index,
            self.profile,
            model,
            counts,
            choice,
            self.audit_rate(index),
            now,
            max(model.seen, newest.model.seen if newest is not None else 0),
            waiting,
        )

    def _certify(
        self, model: Recalibration, labels: list[Label], waiting: float | None
    ) -> ThresholdChoice:
        """The threshold the uniform labels certify (a uniform sample of the questions: plain
        Clopper-Pearson, no weights; ``Calibrator.certifying``); the others only refit the
        calibration. Only draws queued before the oldest one still waiting for its verdict
        count: reviewers take items in priority order, so the verdicts that came back first
        are no uniform sample of the draws."""
        assert self.target is not None
        uniform = sorted(
            (
                lb
                for lb in self.calibrator.certifying(labels, model)
                if waiting is None or lb.drawn_at < waiting
            ),
            key=lambda lb: (lb.drawn_at, lb.id),
        )
        return certify(
            model.scores(uniform),
            [lb.correct for lb in uniform],
            self.target,
            noun="uniform labels (audit draws, and every answer while none was answered)",
        )

    def policy(self, state: CollectionRisk, base: Policy, *, own: bool = False) -> Policy:
        """``base`` with the collection's certified threshold (no target risk: ``base``). With a
        target and no certified threshold, nothing is answered automatically. ``own``: the
        request set its own thresholds; they may be stricter than the certified one, never
        looser."""
        if self.target is None:
            return base
        choice = state.choice
        assert choice is not None
        if choice.threshold is None:
            return replace(base, not_calibrated=choice.reason)
        threshold = max(choice.threshold, base.review_below) if own else choice.threshold
        return replace(
            base,
            review_below=max(threshold, base.abstain_below),
            threshold_note=f"risk threshold {choice.threshold:.3f}: {self.target.describe()}",
        )

    def draw_audit(self, index: str) -> float | None:
        """The audit draw, made for every checked answer whatever the policy decided: the audit
        rate when drawn, else None."""
        rate = self.audit_rate(index)
        with self._lock:
            drawn = rate > 0 and self._rng.random() < rate
        return rate if drawn else None

    # ---------------------------------------------------------------- refits
    def _maybe_refit(self, state: CollectionRisk) -> None:
        every = self.settings.policy.calibrate_every
        if self._executor is None or every <= 0:
            return
        if state.counts.reviewed - state.refit_from < every:
            return
        with self._lock:
            running = self._refits.get(state.index)
            if running is not None and not running.done():
                return
            self._refits[state.index] = self._executor.submit(self._background, state.index)

    def _background(self, index: str) -> RefitReport | None:
        try:
            return self.refit(index)
        except Exception:  # a failed refit leaves the version in force; the next labels retry
            logger.exception("calibration refit of index %s failed", index)
            return None

    def wait_for_refits(self, timeout: float | None = None) -> None:
        """Block until the refits started so far are done (tests, shutdown)."""
        with self._lock:
            pending = list(self._refits.values())
        for future in pending:
            future.result(timeout)

    def refit(self, index: str) -> RefitReport:
        """Refit the collection's calibration from all its labels now; the new version is
        written, and swapped in when it is no worse on the held-back labels."""
        started = time.perf_counter()
        current = self.store.calibrations.in_force(index, self.profile)
        model = current.model if current is not None else Recalibration()
        labels = self.calibrator.fittable(self.store.labels.labels(index, self.profile))
        if not labels:
            raise ItemNotFoundError(
                f"index {index!r} has no reviewer labels for profile {self.profile}: "
                "nothing to calibrate"
            )
        outcome = self.calibrator.refit(labels, model, version=0, now=time.time())
        report = {
            "reason": outcome.reason,
            "held_back": outcome.held_back,
            "before": outcome.before,
            "after": outcome.after,
            "in_sample_before": evaluate(model, labels),
            "in_sample_after": evaluate(outcome.candidate, labels),
        }
        version = self.store.calibrations.write(
            index, self.profile, outcome.candidate, accepted=outcome.accepted, report=report
        )
        if outcome.accepted:
            self.store.calibrations.swap(index, self.profile, version)
        logger.info("calibration of index %s (%s): %s", index, self.profile, outcome.reason)
        self._forget(index)
        return RefitReport(
            index,
            self.profile,
            len(labels),
            outcome.accepted,
            version,
            outcome.reason,
            outcome.before,
            outcome.after,
            time.perf_counter() - started,
        )

    def _forget(self, index: str) -> None:
        with self._lock:
            self._cache.pop(index, None)

    def status(self, *, fresh: bool = False) -> list[CollectionRisk]:
        """Every collection of this profile that has labels or a calibration (``fresh``: read
        now, not from the last ``calibration_refresh_s``)."""
        indexes = {c.index_name for c in self.store.labels.counts() if c.profile == self.profile}
        with self._lock:
            indexes |= set(self._cache)
        return [self.state(i, fresh=fresh) for i in sorted(indexes)]

    def in_force(self, index: str) -> CalibrationVersion | None:
        return self.store.calibrations.in_force(index, self.profile)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
