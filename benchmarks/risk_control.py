"""Risk control replayed: a deployment learning its threshold from its reviewers, on labelled data.

Each labelled answer of a ``ragguard eval`` run folder (checked answers only: a declined or
unchecked answer is never delivered and never reviewed) arrives in a random order, as questions
would. The deployment starts with the prior confidence and no labels, so it answers nothing
automatically (``not_calibrated``) and every answer goes to a reviewer, whose verdict is the gold
label; once the labels certify a threshold for the target risk (``certify_at_checkpoint``),
answers at or above it go out and those below go to a reviewer; whatever the decision, each
answer is also drawn for an audit at ``--audit-rate``. Only the uniform labels (the cold
start's and the audit draws) certify thresholds; every label refits the calibration, after every
``--every`` new labels (``guards.risk.Calibrator.refit``: refused when worse on the held-back
labels), as the server does.

After k = 25, 50, 100 and 200 labels the state is frozen and judged on the questions that have
not arrived yet ("the rest"): the realised error rate among the answered ones (selective) or the
share of all of them answered wrongly (conformal), the coverage, and the AUROC and ECE of the
calibrated confidence there (the prior's beside them). Over ``--orders`` random orders, the table
gives how often the realised risk stayed within the target (nothing answered counts as within),
the mean coverage and the median realised risk of the orders that answered.

The prior is the confidence recorded with each answer (``--prior recorded``): for SmolLM2's
records that is the shipped default; for the 1.5B's int8 records it is the same SmolLM2 default,
since the 1.5B's own shipped confidence was fitted on these very records (``--prior profile
--profile qwen2.5-coder-1.5b`` uses it anyway, in-sample). The 1.5B's w8a8 records were made
after that fit, so they recorded it (with the judge's second stage): replay them with ``--prior
profile`` alone, which scores every answer with the SmolLM2 default again, out of sample. The
fixed thresholds of today's policy are judged on the same rests.

    python benchmarks/risk_control.py --runs eval-runs/labelled-smollm2 --orders 100
    python benchmarks/risk_control.py --runs eval-runs/labelled-qwen1.5b --orders 100 \
        --skip rgb_noise
    python benchmarks/risk_control.py --runs eval-runs/labelled-qwen1.5b-w8a8 --orders 100 \
        --pooled --prior profile
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.research.training import load_run  # noqa: E402
from guards.confidence import ConfidenceModel, expected_calibration_error  # noqa: E402
from guards.risk import (  # noqa: E402
    Calibrator,
    Label,
    LabelKind,
    Recalibration,
    RiskMode,
    RiskTarget,
    ThresholdChoice,
    choose_threshold,
)
from guards.risk.calibrator import weighted_auroc  # noqa: E402
from guards.risk.thresholds import certify_at_checkpoint  # noqa: E402
from rag.stages.check import shipped_confidence_path  # noqa: E402

KS = (25, 50, 100, 200)
RISKS = (0.05, 0.1, 0.2)


@dataclass(frozen=True, slots=True)
class Item:
    correct: bool
    confidence: float
    signals: dict[str, float]


@dataclass(slots=True)
class Frozen:
    """The deployment's state when it reached k labels, and where in the order."""

    model: Recalibration
    choice: ThresholdChoice
    position: int
    added: int
    """Audit items that went out as answers: what auditing added to the reviewers' queue."""
    queued: int
    """Every item queued for a reviewer so far."""


@dataclass(slots=True)
class Cell:
    """One (set, mode, risk, k) over the orders."""

    held: list[bool] = field(default_factory=list)
    held_set: list[bool] = field(default_factory=list)
    """Within the target on the whole set: the population the bound speaks of (the rest's
    own sampling noise aside)."""
    coverage: list[float] = field(default_factory=list)
    risk: list[float] = field(default_factory=list)
    auroc: list[float] = field(default_factory=list)
    ece: list[float] = field(default_factory=list)
    prior_auroc: list[float] = field(default_factory=list)
    prior_ece: list[float] = field(default_factory=list)
    audit_share: list[float] = field(default_factory=list)
    """Audit items added to the queue per question asked so far."""


def load_items(run_dir: Path, prior: ConfidenceModel | None) -> list[Item]:
    items = []
    for answer in load_run(run_dir):
        signals = {k: float(v) for k, v in answer.record.get("signals", {}).items()}
        confidence = answer.record.get("confidence")
        if prior is not None:
            confidence = prior.score(signals)
        if confidence is None:
            continue
        items.append(Item(bool(answer.correct), float(confidence), signals))
    return items


def replay(
    items: Sequence[Item],
    order: Sequence[int],
    target: RiskTarget,
    *,
    audit_rate: float,
    every: int,
    rng: random.Random,
) -> dict[int, Frozen]:
    calibrator = Calibrator()
    labels: list[Label] = []
    model = Recalibration()
    choice = choose_threshold([], [], target)
    frozen: dict[int, Frozen] = {}
    added = queued = refit_from = 0
    for position, index in enumerate(order):
        item = items[index]
        score = model.apply(item.confidence, item.signals)
        cold = choice.threshold is None
        answered = not cold and score >= (choice.threshold or 0.0)
        drawn = rng.random() < audit_rate  # the audit draw, made for every answer
        if cold or drawn:  # a uniform label: drawn whatever its confidence
            propensity = audit_rate if answered else 1.0
            kind, uniform = (LabelKind.FLAGGED if cold else LabelKind.AUDIT), True
            added += int(answered)
            queued += 1
        elif not answered:  # flagged by the threshold: every one of them is reviewed
            propensity, kind, uniform = 1.0, LabelKind.FLAGGED, False
            queued += 1
        else:
            continue
        now = float(position)
        labels.append(
            Label(item.correct, item.confidence, item.signals, propensity, kind, str(index),
                  created_at=now, uniform=uniform, drawn_at=now)
        )  # fmt: skip
        if every > 0 and len(labels) - refit_from >= every:  # refused or not, due again later
            model = calibrator.refit(labels, model, version=model.version + 1, now=now).current
            refit_from = len(labels)
        uniform_labels = calibrator.certifying(labels, model)
        choice = certify_at_checkpoint(
            model.scores(uniform_labels), [lb.correct for lb in uniform_labels], target
        )
        if len(labels) in KS:
            frozen[len(labels)] = Frozen(model, choice, position, added, queued)
            if len(labels) == max(KS):
                break
    return frozen


def realised_risk(
    state: Frozen, items: Sequence[Item], target: RiskTarget
) -> tuple[float | None, np.ndarray, np.ndarray, np.ndarray]:
    """The realised risk on ``items`` at the state's threshold (None: nothing answered, for the
    selective risk), and the answered mask, scores and labels."""
    y = np.array([it.correct for it in items], dtype=float)
    scores = np.array([state.model.apply(it.confidence, it.signals) for it in items])
    t = state.choice.threshold
    answered = scores >= t if t is not None else np.zeros(len(items), dtype=bool)
    wrong = answered & (y < 0.5)
    if target.mode is RiskMode.SELECTIVE:
        realised = float(wrong.sum() / answered.sum()) if answered.any() else None
    else:
        realised = float(wrong.mean()) if len(items) else None
    return realised, answered, scores, y


def judge_rest(
    state: Frozen,
    rest: Sequence[Item],
    target: RiskTarget,
    cell: Cell,
    population: Sequence[Item],
) -> tuple[np.ndarray, np.ndarray]:
    prior = np.array([it.confidence for it in rest])
    realised, answered, scores, y = realised_risk(state, rest, target)
    cell.held.append(realised is None or realised <= target.risk)
    whole, *_ = realised_risk(state, population, target)
    cell.held_set.append(whole is None or whole <= target.risk)
    cell.coverage.append(float(answered.mean()) if len(rest) else 0.0)
    if realised is not None and answered.any():
        cell.risk.append(realised)
    ones = np.ones(len(rest))
    if 0 < y.sum() < len(y):
        cell.auroc.append(weighted_auroc(scores, y, ones))
        cell.prior_auroc.append(weighted_auroc(prior, y, ones))
    cell.ece.append(expected_calibration_error(scores, y))
    cell.prior_ece.append(expected_calibration_error(prior, y))
    cell.audit_share.append(state.added / (state.position + 1))
    return prior, y


def fixed_thresholds(prior: ConfidenceModel | None, profile: str) -> float:
    """Today's answer threshold: the prior's fitted ``review_below``, else the setting's default."""
    notes = (prior or ConfidenceModel.load(shipped_confidence_path(None))).notes
    value = notes.get("review_below", 0.2)
    return float(value) if isinstance(value, int | float) else 0.2


def simulate(
    name: str,
    items: Sequence[Item],
    args: argparse.Namespace,
    fixed: float,
) -> dict[str, object]:
    out: dict[str, object] = {"set": name, "questions": len(items),
                              "accuracy": statistics.fmean(it.correct for it in items)}  # fmt: skip
    cells: dict[tuple[str, float, int], Cell] = {}
    fixed_risk: list[float] = []
    fixed_cov: list[float] = []
    for mode in args.modes:
        for risk in RISKS:
            target = RiskTarget(risk, args.confidence, RiskMode(mode))
            for o in range(args.orders):
                rng = random.Random(f"{name}-{o}")
                order = list(range(len(items)))
                rng.shuffle(order)
                frozen = replay(
                    items, order, target, audit_rate=args.audit_rate, every=args.every,
                    rng=random.Random(f"{name}-{o}-audit-{mode}-{risk}"),
                )  # fmt: skip
                for k, state in frozen.items():
                    rest = [items[i] for i in order[state.position + 1 :]]
                    if len(rest) < args.min_rest:
                        continue
                    cell = cells.setdefault((mode, risk, k), Cell())
                    prior, y = judge_rest(state, rest, target, cell, items)
                    if mode == "selective" and risk == 0.1 and k == 25:
                        answered = prior >= fixed
                        fixed_cov.append(float(answered.mean()))
                        if answered.any():
                            fixed_risk.append(float((y[answered] < 0.5).mean()))
    rows = []
    for (mode, risk, k), c in sorted(cells.items()):
        rows.append({
            "mode": mode, "target": risk, "k": k, "orders": len(c.held),
            "held": statistics.fmean(c.held),
            "held_set": statistics.fmean(c.held_set),
            "coverage": statistics.fmean(c.coverage),
            "median_risk": statistics.median(c.risk) if c.risk else None,
            "answered_orders": len(c.risk),
            "auroc": statistics.fmean(c.auroc) if c.auroc else None,
            "prior_auroc": statistics.fmean(c.prior_auroc) if c.prior_auroc else None,
            "ece": statistics.fmean(c.ece), "prior_ece": statistics.fmean(c.prior_ece),
            "audit_share": statistics.fmean(c.audit_share),
        })  # fmt: skip
    out["rows"] = rows
    if fixed_risk or fixed_cov:
        out["fixed"] = {
            "threshold": fixed,
            "coverage": statistics.fmean(fixed_cov) if fixed_cov else 0.0,
            "median_risk": statistics.median(fixed_risk) if fixed_risk else None,
            "breaks_0.1": statistics.fmean(r > 0.1 for r in fixed_risk) if fixed_risk else 0.0,
        }
    return out


def refit_seconds(items: Sequence[Item], n: int = 1000) -> float:
    """Median seconds of one refit on ``n`` labels (drawn with replacement from ``items``)."""
    rng = random.Random(0)
    labels = [
        Label(it.correct, it.confidence, it.signals, id=str(i))
        for i, it in enumerate(rng.choice(items) for _ in range(n))
    ]
    times = []
    for _ in range(5):
        started = time.perf_counter()
        Calibrator().refit(labels, Recalibration(), version=1)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _f(value: object, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}" if not math.isnan(value) else "–"
    return str(value)


def markdown(results: list[dict[str, object]], args: argparse.Namespace) -> str:
    lines = []
    for mode in args.modes:
        what = "among answered" if mode == "selective" else "delivered, of all questions"
        lines += [
            f"**{mode}** (wrong answers {what}; target held = realised ≤ target on the rest, "
            f"in {args.orders} random orders; coverage = share of the rest answered)",
            "",
            "| set (n, acc.) | k | held @0.05 | cov. | held @0.1 (set) | cov. | risk "
            "| held @0.2 | cov. | AUROC prior → cal. | ECE prior → cal. |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for res in results:
            rows = [r for r in res["rows"] if r["mode"] == mode]  # type: ignore[index,union-attr]
            for k in KS:
                by = {r["target"]: r for r in rows if r["k"] == k}
                if not by:
                    continue
                mid = by.get(0.1, {})
                cells = []
                for risk in RISKS:
                    r = by.get(risk)
                    held = _f(r["held"]) if r else "–"
                    if r and risk == 0.1:
                        held += f" ({_f(r['held_set'])})"
                    cells += [held, _f(r["coverage"]) if r else "–"]
                    if risk == 0.1:
                        cells.append(_f(r["median_risk"]) if r else "–")
                lines.append(
                    f"| {res['set']} ({res['questions']}, {_f(res['accuracy'])}) | {k} | "
                    + " | ".join(cells)
                    + f" | {_f(mid.get('prior_auroc'))} → {_f(mid.get('auroc'))}"
                    + f" | {_f(mid.get('prior_ece'))} → {_f(mid.get('ece'))} |"
                )
        lines.append("")
    lines += [
        "**today's fixed threshold** (confidence ≥ review_below answered), on the same rests at "
        "k = 25, selective risk:",
        "",
        "| set | threshold | coverage | median realised risk | orders with risk > 0.1 |",
        "| --- | --- | --- | --- | --- |",
    ]
    for res in results:
        fixed = res.get("fixed")
        if isinstance(fixed, dict):
            lines.append(
                f"| {res['set']} | {fixed['threshold']:.2f} | {_f(fixed['coverage'])} | "
                f"{_f(fixed['median_risk'])} | {_f(fixed['breaks_0.1'])} |"
            )
    shares = []
    for res in results:
        rows = res["rows"]  # type: ignore[index]
        worst = max((r["audit_share"] for r in rows), default=0.0)  # type: ignore[union-attr]
        shares.append(f"{res['set']} {worst:.3f}")
    lines += [
        "",
        "audit items added to the reviewers' queue per question asked (the largest mean over "
        f"the cells; rate {args.audit_rate}): " + ", ".join(shares),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, required=True, help="eval output folder of sets")
    parser.add_argument("--orders", type=int, default=100)
    parser.add_argument("--audit-rate", type=float, default=0.05)
    parser.add_argument("--every", type=int, default=25, help="refit after this many labels")
    parser.add_argument("--confidence", type=float, default=0.9)
    parser.add_argument("--modes", nargs="+", default=["selective", "conformal"])
    parser.add_argument("--skip", nargs="*", default=["rgb_noise"])
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--min-rest", type=int, default=20, help="fewest questions left to judge")
    parser.add_argument("--pooled", action="store_true", help="also every set as one deployment")
    parser.add_argument("--prior", choices=["recorded", "profile"], default="recorded")
    parser.add_argument("--profile", default=None, help="with --prior profile")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON")
    args = parser.parse_args(argv)
    prior = (
        ConfidenceModel.load(shipped_confidence_path(args.profile))
        if args.prior == "profile"
        else None
    )
    fixed = fixed_thresholds(prior, args.profile or "")
    sets: dict[str, list[Item]] = {}
    for run_dir in sorted(p for p in args.runs.iterdir() if any(p.glob("*/items.jsonl"))):
        if run_dir.name in args.skip or (args.only and run_dir.name not in args.only):
            continue
        sets[run_dir.name] = load_items(run_dir, prior)
    if args.pooled:
        sets["all sets"] = [it for items in list(sets.values()) for it in items]
    started = time.perf_counter()
    results = []
    for name, items in sets.items():
        results.append(simulate(name, items, args, fixed))
        print(
            f"{name}: {len(items)} answers, {time.perf_counter() - started:.0f} s", file=sys.stderr
        )
    pooled = [it for items in sets.values() for it in items]
    seconds = refit_seconds(pooled)
    print(markdown(results, args))
    print(f"\none refit on 1,000 labels: {seconds * 1000:.0f} ms (median of 5)")
    if args.out is not None:
        args.out.write_text(json.dumps({"sets": results, "refit_1000_s": seconds}, indent=1))


if __name__ == "__main__":
    main()
