"""The report's figures, drawn with matplotlib (Agg backend) and returned as PNG bytes.

Each function takes the per-configuration data (every configuration, in the report's order, with
empty data where it has none) and draws them into one figure, so that configurations compare at
a glance; the n-th configuration has the n-th colour in every figure. None when there is nothing
to draw.
"""

from __future__ import annotations

import io
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

OUTCOME_COLOURS = {"pass": "#4c9a5b", "fail": "#c8553d", "abstain": "#b8b8b8"}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=110)
    _pyplot().close(fig)
    return buffer.getvalue()


def reliability_diagram(
    bins: Mapping[str, Sequence[Sequence[float]]], title: str = "Reliability diagram"
) -> bytes | None:
    """Accuracy against mean confidence per confidence bin (rows: lower, upper, count, mean
    confidence, accuracy); marker area follows the bin's size. The diagonal is perfect
    calibration. Legend labels may carry each configuration's ECE."""
    if not any(bins.values()):
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 4.4))
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=1, label="calibrated")
    for i, (name, rows) in enumerate(bins.items()):
        if rows:
            x = [r[3] for r in rows]
            y = [r[4] for r in rows]
            sizes = [20 + 180 * r[2] / max(row[2] for row in rows) for r in rows]
            # Points only: joining sparse bins with lines suggests a trend between them.
            ax.scatter(x, y, s=sizes, color=f"C{i}", alpha=0.8, label=name)
    ax.set(xlim=(0, 1), ylim=(0, 1.02), xlabel="confidence", ylabel="accuracy")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    return _png(fig)


def risk_coverage_curve(curves: Mapping[str, Sequence[Sequence[float]]]) -> bytes | None:
    """Accuracy of the answered questions against the share answered (most confident first)."""
    if not any(curves.values()):
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 4.4))
    for i, (name, points) in enumerate(curves.items()):
        if points:
            ax.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                marker="o",
                markersize=3,
                label=name,
                color=f"C{i}",
            )
    ax.set(
        xlim=(0, 1.02),
        ylim=(0, 1.02),
        xlabel="coverage (share answered)",
        ylabel="accuracy of answered",
    )
    ax.set_title("Risk–coverage")
    ax.legend(loc="lower left", fontsize=8)
    return _png(fig)


def latency_histogram(latencies: Mapping[str, Sequence[float]]) -> bytes | None:
    """End-to-end seconds per question; a dashed line at each configuration's median."""
    if not any(latencies.values()):
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 4.0))
    values = [v for vs in latencies.values() for v in vs]
    edges = list(_edges(min(values), max(values), 24))
    for i, (name, seconds) in enumerate(latencies.items()):
        if seconds:
            ax.hist(seconds, bins=edges, alpha=0.55, label=name, color=f"C{i}")
            ax.axvline(statistics.median(seconds), color=f"C{i}", linestyle="--", linewidth=1.2)
    ax.set(xlabel="seconds per question (end to end)", ylabel="questions")
    ax.set_title("Latency")
    ax.legend(fontsize=8)
    return _png(fig)


def _edges(low: float, high: float, num: int) -> Sequence[float]:
    if high <= low:
        high = low + 1e-3
    step = (high - low) / num
    return [low + i * step for i in range(num + 1)]


def guard_verdicts(counts: Mapping[str, Mapping[str, Mapping[str, int]]]) -> bytes | None:
    """Per configuration, the pass / fail / abstain counts of each guard (stacked bars)."""
    names = [n for n, c in counts.items() if c]
    if not names:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(names), figsize=(4.4 * len(names), 3.8), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        guards = list(counts[name])
        bottom = [0] * len(guards)
        for outcome, colour in OUTCOME_COLOURS.items():
            heights = [counts[name][g].get(outcome, 0) for g in guards]
            ax.bar(guards, heights, bottom=bottom, color=colour, label=outcome)
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        ax.set_title(name)
        ax.set_ylabel("answers")
        ax.tick_params(axis="x", labelrotation=25, labelsize=8)
    axes[0][0].legend(fontsize=8)
    fig.suptitle("Guard verdicts")
    return _png(fig)
