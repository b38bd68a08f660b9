"""The guard interface: ``Guard.check(ctx) -> GuardResult``, and ``GuardChain`` to run several.

Guards are pure functions of their context with thresholds fixed in the constructor. When the
evidence a guard needs is missing it answers ABSTAIN, never PASS; a guard that raises is recorded
as ABSTAIN with the error, so a broken check can never wave an answer through.
"""

from __future__ import annotations

import enum
import logging
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, ClassVar

logger = logging.getLogger(__name__)


class Outcome(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    ABSTAIN = "abstain"


@dataclass(frozen=True, slots=True)
class Candidate:
    """One sampled answer with what the generator knew about it."""

    text: str
    token_logprobs: tuple[float, ...] = ()
    finish_reason: str | None = None
    """"stop", "length" (cut off at max_tokens), "abort", or "repetition loop" (ended early by
    the generator's loop stop check)."""


@dataclass(frozen=True, slots=True)
class GuardPassage:
    """A retrieved passage, as guards see it (guards never import ``rag``)."""

    passage_id: str
    text: str
    score: float = 0.0


@dataclass(frozen=True, slots=True)
class GuardContext:
    """Everything a guard may look at for one answer."""

    question: str
    answer: str
    passages: tuple[GuardPassage, ...] = ()
    candidates: tuple[Candidate, ...] = ()
    verification: float | None = None
    """The generator's own probability that the answer is correct and supported (P(yes) to a
    verification question asked after the answer), or None when it was not asked."""
    judgement: float | None = None
    """A judge model's probability that the answer is correct and supported (``guards.judge``),
    or None when it was not asked."""

    @property
    def ranked(self) -> tuple[GuardPassage, ...]:
        """The passages best first. ``passages`` is in the prompt's order (the numbers the
        answer cites), which need not be the retrieval rank."""
        return tuple(sorted(self.passages, key=lambda e: -e.score))


@dataclass(frozen=True, slots=True)
class GuardResult:
    """One guard's verdict: outcome, a score in [0, 1] where meaningful, and why."""

    name: str
    outcome: Outcome
    score: float | None
    reason: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    signals: Mapping[str, float] = field(default_factory=dict)
    """Numbers for the confidence model, named as the guard declares them (``Guard.signals``),
    each centred so that 0 means "no evidence either way"; a signal the guard could not measure
    is left out."""

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.PASS


class Guard(ABC):
    """A check on an answer. Subclasses set ``name`` and implement ``check``."""

    name: str = "guard"
    signals: ClassVar[Mapping[str, int]] = {}
    """The signals this guard's results may carry (see ``GuardResult.signals``), each with the
    way it should push the confidence: +1 when a higher value means a likelier right answer, -1
    when lower does. A fitted confidence model may weigh a signal only in its direction."""

    @abstractmethod
    def check(self, ctx: GuardContext) -> GuardResult:
        """Judge the answer in ``ctx``; ABSTAIN when the needed evidence is missing."""

    def abstain(self, reason: str, **evidence: Any) -> GuardResult:
        return GuardResult(self.name, Outcome.ABSTAIN, None, reason, evidence)


@dataclass(frozen=True, slots=True)
class GuardRun:
    """The audit record of one chain run."""

    run_id: str
    started_at: float
    results: tuple[GuardResult, ...]
    timings_s: Mapping[str, float]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


AuditSink = Callable[[GuardRun], None]


def log_audit(run: GuardRun) -> None:
    """Default audit sink: one log record per run with each guard's outcome, score, signals and
    time. Reasons and evidence quote the answer and passages, so they stay out of the log (the
    answer's ``guard_results`` and the review queue keep them)."""
    verdicts = [
        {"name": r.name, "outcome": r.outcome.value, "score": r.score, "signals": dict(r.signals)}
        for r in run.results
    ]
    fields = {"run_id": run.run_id, "guards": verdicts, "timings_s": dict(run.timings_s)}
    logger.info("guard run %s", run.run_id, extra={"fields": fields})


class GuardChain:
    """Runs guards in order, times each, and leaves one audit record per run."""

    def __init__(self, guards: Sequence[Guard], *, audit: AuditSink | None = log_audit):
        names = [g.name for g in guards]
        if len(set(names)) != len(names):
            raise ValueError(f"guard names must be unique, got {names}")
        self.guards = list(guards)
        self.audit = audit

    def run(self, ctx: GuardContext) -> GuardRun:
        started = time.time()
        results: list[GuardResult] = []
        timings: dict[str, float] = {}
        for guard in self.guards:
            t0 = time.perf_counter()
            try:
                result = guard.check(ctx)
            except Exception as exc:  # a broken guard must not pass an answer
                logger.exception("guard %s failed", guard.name)
                result = guard.abstain(f"guard error: {type(exc).__name__}: {exc}")
            timings[guard.name] = time.perf_counter() - t0
            undeclared = set(result.signals) - set(guard.signals)
            if undeclared:  # a programming error, but never one that may pass an answer
                logger.error("guard %s emitted undeclared signals %s", guard.name, undeclared)
                result = replace(
                    result, signals={k: v for k, v in result.signals.items() if k in guard.signals}
                )
            results.append(result)
        run = GuardRun(uuid.uuid4().hex, started, tuple(results), timings)
        if self.audit is not None:
            self.audit(run)
        return run
