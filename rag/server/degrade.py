"""Degrade under load: past a queue length or a recent queue time, answer with less work instead
of only refusing more.

The steps, in order, each dropping work the answer can do without (its confidence is then
computed from the signals it actually had; the guards that need the dropped work abstain):

1. ``samples``: no extra samples (n → 1): the self-consistency signals go.
2. ``judge``: no judge cascade: the first-stage confidence stands.

Pressure is the larger of (questions waiting for a slot) ÷ ``degrade_waiting`` and (recent wait
for a slot) ÷ ``degrade_queue_s``; at 1 or more the first step applies, at 2 or more both. A step
that would change nothing (n is already 1, no judge is configured) is not applied, so it is not
reported either: every degraded answer lists what it went without (``Result.degraded``).
"""

from __future__ import annotations

from dataclasses import dataclass

STEPS = ("samples", "judge")
"""What is dropped, in the order it is dropped."""
_ALPHA = 0.2
"""Weight of one wait in the recent-wait average (about the last 5-10 questions)."""


@dataclass(slots=True)
class Degrader:
    """Chooses the degradation steps of each admitted question from the load."""

    waiting: int = 0
    """Questions waiting for a slot at which the first step applies (0: not by queue length)."""
    queue_s: float = 0.0
    """Recent wait for a slot at which the first step applies (0: not by queue time)."""
    recent_wait_s: float = 0.0
    """Moving average of the admitted questions' waits for a slot."""

    @property
    def enabled(self) -> bool:
        return self.waiting > 0 or self.queue_s > 0

    def pressure(self, num_waiting: int) -> float:
        """How far past the thresholds the load is (1: at the first step's threshold)."""
        by_length = num_waiting / self.waiting if self.waiting > 0 else 0.0
        by_time = self.recent_wait_s / self.queue_s if self.queue_s > 0 else 0.0
        return max(by_length, by_time)

    def steps(self, num_waiting: int, waited_s: float) -> tuple[str, ...]:
        """The steps for a question admitted after waiting ``waited_s`` with ``num_waiting``
        others still waiting."""
        self.recent_wait_s += _ALPHA * (waited_s - self.recent_wait_s)
        if not self.enabled:
            return ()
        return STEPS[: int(self.pressure(num_waiting))]
