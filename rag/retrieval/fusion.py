"""Reciprocal rank fusion: one ranking from several, by the ranks alone (Cormack et al., 2009)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

T = TypeVar("T", bound=Hashable)

RRF_K = 60
"""The constant of the original paper; it damps the weight of the very first ranks."""


def reciprocal_rank_fusion(rankings: Sequence[Sequence[T]], k: int = RRF_K) -> list[T]:
    """Items of all ``rankings`` (each best first), ordered by the sum of 1 / (k + rank).

    Ties keep the order in which items were first seen, earlier rankings first."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    fused: dict[T, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(fused, key=lambda item: -fused[item])
