"""Krippendorff's alpha: agreement among any number of raters, with missing ratings.

alpha = 1 - D_o / D_e, from the coincidence matrix of values paired within units (Krippendorff,
"Computing Krippendorff's Alpha-Reliability", 2011). Units rated by fewer than two raters carry
no information about agreement and are left out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from itertools import permutations
from typing import Any, Literal

Metric = Literal["nominal", "ordinal", "interval"]


def krippendorff_alpha(
    units: Sequence[Sequence[float | None]] | Mapping[Any, Sequence[float | None]],
    metric: Metric = "interval",
) -> float | None:
    """Alpha over ``units`` (one list of raters' values per unit; None = not rated).

    None when it is undefined: fewer than two pairable values, or no variation at all."""
    rated = [
        [v for v in values if v is not None]
        for values in (units.values() if isinstance(units, Mapping) else units)
    ]
    rated = [values for values in rated if len(values) >= 2]
    coincidence: defaultdict[tuple[float, float], float] = defaultdict(float)
    for values in rated:
        weight = 1.0 / (len(values) - 1)
        for a, b in permutations(values, 2):
            coincidence[(a, b)] += weight
    totals: defaultdict[float, float] = defaultdict(float)
    for (a, _), count in coincidence.items():
        totals[a] += count
    n = sum(totals.values())
    if n <= 1 or len(totals) < 2:
        return None
    delta = _metric(metric, totals)
    observed = sum(count * delta(a, b) for (a, b), count in coincidence.items()) / n
    expected = sum(totals[a] * totals[b] * delta(a, b) for a in totals for b in totals) / (
        n * (n - 1)
    )
    return 1.0 - observed / expected if expected > 0 else None


def _metric(metric: Metric, totals: Mapping[float, float]) -> Callable[[float, float], float]:
    if metric == "nominal":
        return lambda a, b: 0.0 if a == b else 1.0
    if metric == "interval":
        return lambda a, b: float(a - b) ** 2
    if metric == "ordinal":
        values = sorted(totals)
        rank = {v: i for i, v in enumerate(values)}

        def ordinal(a: float, b: float) -> float:
            lo, hi = sorted((rank[a], rank[b]))
            if lo == hi:
                return 0.0
            between = sum(totals[values[k]] for k in range(lo, hi + 1))
            return (between - (totals[values[lo]] + totals[values[hi]]) / 2) ** 2

        return ordinal
    raise ValueError(f"unknown metric {metric!r}: use nominal, ordinal or interval")
