"""Fixtures shared by the review-store tests: a hand-moved clock and a store on a real SQLite
file that uses it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from guards.review import ReviewStore
from tests.guards.fake_clock import Clock


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> Iterator[ReviewStore]:
    s = ReviewStore(
        tmp_path / "reviews.sqlite", claim_ttl_s=60, sla_s=3600, gold_rate=0, clock=clock
    )
    yield s
    s.close()
