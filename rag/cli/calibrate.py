"""``ragguard calibrate --index NAME``: refit one collection's confidence from its reviewers'
labels now, and print the figures before and after (held-back labels first, then all labels).

It opens the review store of the data directory (or ``RAGGUARD_REVIEW_DB``) and the settings'
generator profile (``RAGGUARD_MODEL``), so it sees exactly the labels the server learns from;
a new version is swapped in only when it is no worse on the held-back labels, as the server's
background refit does. Imports are lazy so that ``ragguard --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rag.cli.console import out

_FIGURES = ("labels", "log_loss", "ece", "auroc", "accuracy", "mean_confidence")


def _row(name: str, before: Mapping[str, float], after: Mapping[str, float]) -> str:
    def cell(figures: Mapping[str, float], key: str) -> str:
        value = figures.get(key)
        return "-" if value is None else (f"{value:.0f}" if key == "labels" else f"{value:.3f}")

    pairs = "  ".join(f"{cell(before, k):>7} -> {cell(after, k):<7}" for k in _FIGURES)
    return f"{name:<12}{pairs}"


def cmd_calibrate(args: argparse.Namespace) -> int:
    from rag.review_desk import open_review_store
    from rag.review_desk.risk import RiskControl
    from rag.settings import Settings

    overrides: dict[str, Any] = {"data_dir": args.data_dir} if args.data_dir else {}
    settings = Settings(**overrides)
    store = open_review_store(settings)
    risk = RiskControl(store, settings, background=False)
    try:
        report = risk.refit(args.index)
        state = risk.state(args.index, fresh=True)
        in_force = risk.in_force(args.index)
        if args.json:
            out(json.dumps({**asdict(report), "status": state.as_dict()}, indent=2))
            return 0
        out(f"index {args.index} ({report.profile}): {report.labels} labels, "
            f"refit in {report.seconds * 1000:.0f} ms")  # fmt: skip
        out(f"version {report.version}: {report.reason}")
        header = "  ".join(f"{k:>18}" for k in _FIGURES)
        out(f"{'':<12}{header}")
        held = in_force.report if in_force is not None else {}
        out(_row("held back", report.before, report.after))
        if held.get("in_sample_before") is not None and report.accepted:
            out(_row("all labels", held["in_sample_before"], held["in_sample_after"]))
        model = state.model
        out(f"in force: version {model.version} ({model.stage}; intercept {model.intercept:+.3f},"
            f" slope {model.slope:.3f}, {len(model.offsets)} signal offsets)")  # fmt: skip
        if state.choice is not None:
            out(f"threshold: {state.choice.reason}")
            out(f"coverage {state.choice.coverage:.1%} of the labelled questions")
        return 0
    finally:
        risk.close()
        store.close()


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "calibrate", help="refit a collection's confidence from its reviewers' labels now"
    )
    p.add_argument("--index", required=True, help="the collection (index name)")
    p.add_argument("--data-dir", type=Path, help="data directory (default RAGGUARD_DATA_DIR)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_calibrate)
