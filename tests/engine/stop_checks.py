"""A stop check of the engine tests' own (``SamplingParams.stop_check``), so that the engine is
tested without the guards: it ends a completion whose last tokens repeat one short pattern."""

from __future__ import annotations

from collections.abc import Sequence

LOOP_REASON = "tail loop"
MAX_PATTERN = 8
REPEATS = 4


def stop_on_tail_loop(token_ids: Sequence[int]) -> str | None:
    """``LOOP_REASON`` once the last tokens are one pattern of 1-8 tokens repeated 4 times."""
    for size in range(1, MAX_PATTERN + 1):
        tail = list(token_ids[-size * REPEATS :])
        if len(tail) == size * REPEATS and tail == tail[:size] * REPEATS:
            return LOOP_REASON
    return None
