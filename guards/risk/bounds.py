"""Upper confidence bounds on an error rate from labels.

``binomial_upper_bound`` is the Clopper–Pearson bound: the largest error rate p under which
seeing at most ``errors`` wrong answers in ``n`` still has probability ≥ 1 − confidence (the
Beta(errors + 1, n − errors) quantile). It is exact for unweighted labels. Weighted labels
(inverse-propensity weights) enter through Kish's effective sample size
n_eff = (Σw)² / Σw² and the weighted error share, a standard approximation that is exact when
every weight is equal and widens the bound as the weights spread.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy.stats import beta


def binomial_upper_bound(errors: float, n: float, confidence: float) -> float:
    """The one-sided Clopper–Pearson upper bound on the error rate (1.0 with no labels)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n < 0 or errors < 0 or errors > n + 1e-9:
        raise ValueError(f"need 0 <= errors <= n, got errors={errors}, n={n}")
    if n <= 0 or errors >= n:
        return 1.0
    return float(beta.ppf(confidence, errors + 1.0, n - errors))


def weighted_upper_bound(
    wrong: Sequence[bool], weights: Sequence[float], confidence: float
) -> tuple[float, float]:
    """(estimate, upper bound) of the weighted error rate of ``wrong`` (Kish's n_eff)."""
    total = float(sum(weights))
    if total <= 0:
        return 0.0, 1.0
    estimate = sum(w for w, bad in zip(weights, wrong, strict=True) if bad) / total
    n_eff = total * total / float(sum(w * w for w in weights))
    return estimate, binomial_upper_bound(estimate * n_eff, n_eff, confidence)


def min_labels_for(risk: float, confidence: float) -> int:
    """The fewest labels, all of them right, whose upper bound falls to ``risk``: below this
    no threshold can be certified at all (45 for risk 0.05 at 90 %)."""
    if not 0.0 < risk < 1.0:
        raise ValueError(f"risk must be in (0, 1), got {risk}")
    # With no errors the bound is 1 - (1 - confidence) ** (1 / n).
    return math.ceil(math.log(1.0 - confidence) / math.log(1.0 - risk) - 1e-12)
