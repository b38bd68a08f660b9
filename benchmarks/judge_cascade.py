"""The judge and its cascade, measured on labelled generations; one generator's records per call.

Reads ``ragguard eval`` output folders made with the judge asked of every answer
(``docs/eval-configs/labelled-qwen1.5b.toml``, ``labelled-smollm2-judged.toml``), re-runs today's
guards on the records offline as the default settings see them (the first stage: the answer
alone, no judge), and reports per data set:

- the first-stage confidence, validated leave-one-set-out (fitted on every other set);
- the judge's P(yes) alone;
- the cascade: answers whose first-stage confidence is in the band get the second stage (the
  first stage's and the judge's log-odds, re-weighed by a 3-parameter logistic model), others
  keep the first stage. Both stages are fitted without the held-out set, and the second stage's
  training rows carry first-stage scores from models that never saw *their* set either (nested),
  so no label of a scored answer reaches its score;
- the same on new questions of the sets (5 folds by question, nested the same way): the ECE
  there is what a user of these sources should expect;
- what the policy does: accuracy of the answers let through against those flagged.

The band is chosen on the left-out scores: the best mean AUROC over the sets among bands that
judge at most ``--max-share`` of the answers. ``--write-model PROFILE`` then fits both stages on
every set and writes ``rag/data/confidence-PROFILE.json`` and ``rag/data/judged-PROFILE.json``.

    python benchmarks/judge_cascade.py --runs eval-runs/labelled-qwen1.5b \
        --write-model qwen2.5-coder-1.5b
    python benchmarks/judge_cascade.py --runs eval-runs/labelled-smollm2-judged --stage1-shipped
    git show a3260dc:rag/data/confidence-qwen2.5-coder-1.5b.json > eval-runs/int8-fitted.json
    python benchmarks/judge_cascade.py --runs eval-runs/labelled-qwen1.5b-w8a8 \
        --stage1-from eval-runs/int8-fitted.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from judgement import DEFAULT_L2, chains, default_policy, fmt, interval, load_answers  # noqa: E402

from benchmarks.research.training import (  # noqa: E402
    FitOptions,
    LabelledAnswer,
    figures,
    load_run,
    question_fold,
    rescore,
)
from benchmarks.research.training import Recorded as Seen  # noqa: E402
from guards import ConfidenceModel  # noqa: E402
from guards.confidence import judged_features  # noqa: E402
from guards.judge import judge_logit  # noqa: E402
from guards.registry import signal_directions  # noqa: E402
from rag.eval.metrics import auroc  # noqa: E402
from rag.eval.records import read_records  # noqa: E402
from rag.stages.check.checker import DATA, shipped_confidence_path  # noqa: E402

NO_ANSWER_SETS = ("rgb_noise",)
"""Sets whose passages hold no answer: reported apart (the right outcome is to decline)."""
STAGE2_L2 = 1.0
STAGE2_DIRECTIONS = {"first_stage": 1, "judge": 1}
BANDS = [(lo / 100, hi / 100) for lo in range(0, 55, 5) for hi in range(lo + 5, 105, 5)]
Split = Callable[[LabelledAnswer], Any]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, required=True, help="folder of <set>/ eval outputs")
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--l2", type=float, default=DEFAULT_L2, help="first stage's ridge")
    parser.add_argument(
        "--max-share", type=float, default=0.5, help="the band judges at most this share"
    )
    fixed = parser.add_mutually_exclusive_group()
    fixed.add_argument(
        "--stage1-shipped",
        action="store_const",
        dest="stage1_from",
        const=DATA / "confidence.json",
        help="score the first stage with the shipped SmolLM2 confidence (today's default) "
        "instead of refitting it: the judge's gain over what ships",
    )
    fixed.add_argument(
        "--stage1-from",
        type=Path,
        metavar="FILE",
        help="score the first stage with this fitted confidence instead of refitting it (e.g. "
        "a profile's shipped file, on answers of another weight format)",
    )
    parser.add_argument("--write-model", metavar="PROFILE", help="write both stages' files")
    parser.add_argument(
        "--abstain-below",
        type=float,
        help="the policy thresholds to ship with the profile's confidence (chosen from the "
        "risk-coverage table; default: the settings' defaults)",
    )
    parser.add_argument("--review-below", type=float)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    return parser.parse_args(argv)


def judged(a: LabelledAnswer) -> float | None:
    p = a.record.get("judgement")
    return None if p is None else float(p)


def fit_stage2(answers: Sequence[LabelledAnswer], first: Sequence[float]) -> ConfidenceModel:
    rows = [
        judged_features(c, judge_logit(p))
        for a, c in zip(answers, first, strict=True)
        if (p := judged(a)) is not None
    ]
    labels = [a.correct for a in answers if judged(a) is not None]
    return ConfidenceModel.fit(rows, labels, directions=STAGE2_DIRECTIONS, l2=STAGE2_L2)


def cascade(
    answers: Sequence[LabelledAnswer],
    first: Sequence[float],
    stage2: ConfidenceModel,
    band: tuple[float, float],
) -> list[float]:
    """Each answer's final confidence: the second stage inside the band (if judged)."""
    out = []
    for a, c in zip(answers, first, strict=True):
        p = judged(a)
        inside = band[0] <= c <= band[1]
        out.append(
            c if p is None or not inside else stage2.score(judged_features(c, judge_logit(p)))
        )
    return out


class Validation:
    """Out-of-sample scores of both stages under one way of splitting (by set, or by question
    fold), nested for the second stage's training features."""

    def __init__(
        self,
        answers: list[LabelledAnswer],
        options: FitOptions,
        split: Split,
        stage1: ConfidenceModel | None = None,
    ):
        self.answers = answers
        self.options = options
        self.split = split
        self.stage1 = stage1  # a fixed first stage (a fitted file) instead of refitting
        self.groups = list(dict.fromkeys(split(a) for a in answers))
        self.first = self._first_stage(answers, self.groups)
        self.stage2 = {g: self._stage2_without(g) for g in self.groups}

    def _first_stage(self, answers: Sequence[LabelledAnswer], groups: list[Any]) -> list[float]:
        """Each answer's first-stage score from a model that never saw its group."""
        if self.stage1 is not None:
            return [self.stage1.score(a.signals) for a in answers]
        if len(groups) < 2:  # nothing to leave out (two sets in all): in-sample, and said so
            print("  (one group left: its first-stage scores are in-sample)")
            model = self.options.fit(list(answers))
            return [model.score(a.signals) for a in answers]
        scores = [0.0] * len(answers)
        for g in groups:
            model = self.options.fit([a for a in answers if self.split(a) != g])
            for k, a in enumerate(answers):
                if self.split(a) == g:
                    scores[k] = model.score(a.signals)
        return scores

    def _stage2_without(self, held_out: Any) -> ConfidenceModel:
        train = [a for a in self.answers if self.split(a) != held_out]
        inner = [g for g in self.groups if g != held_out]
        return fit_stage2(train, self._first_stage(train, inner))

    def scores(self, band: tuple[float, float]) -> list[float]:
        """Every answer's cascade confidence, in the order of ``answers``."""
        out = list(self.first)
        for g in self.groups:
            idx = [k for k, a in enumerate(self.answers) if self.split(a) == g]
            final = cascade(
                [self.answers[k] for k in idx], [self.first[k] for k in idx], self.stage2[g], band
            )
            for k, c in zip(idx, final, strict=True):
                out[k] = c
        return out


def by_set(answers: list[LabelledAnswer], values: Sequence[float]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for a, v in zip(answers, values, strict=True):
        out.setdefault(a.dataset, []).append(v)
    return out


def labels_of(answers: list[LabelledAnswer]) -> dict[str, list[int]]:
    return by_set(answers, [a.correct for a in answers])  # type: ignore[return-value]


def choose_band(val: Validation, max_share: float) -> tuple[tuple[float, float], list[str]]:
    """The band with the best mean per-set AUROC, left out, among those that judge at most
    ``max_share`` of the answers (the fewer judged on a tie); and the table of candidates."""
    labels = labels_of(val.answers)

    def mean_auroc(band: tuple[float, float]) -> float:
        scores = by_set(val.answers, val.scores(band))
        return float(np.mean([auroc(scores[s], labels[s]) for s in labels]))

    def share(band: tuple[float, float]) -> float:
        return float(np.mean([band[0] <= c <= band[1] for c in val.first]))

    full = mean_auroc((0.0, 1.0))
    rows = [(share(b), mean_auroc(b), b) for b in BANDS]
    allowed = [r for r in rows if r[0] <= max_share]
    best = max(allowed, key=lambda r: (round(r[1], 3), -r[0]))[2]
    lines = [
        f"judging every answer: mean AUROC {full:.3f}; none: {mean_auroc((1.0, 0.0)):.3f}",
        "| band | share judged | mean AUROC |",
        "| --- | --- | --- |",
    ]
    ranked = sorted(allowed, key=lambda r: (-round(r[1], 3), r[0]))[:12]
    for s, m, b in ranked:
        lines.append(f"| {b[0]:.2f}–{b[1]:.2f} | {s:.2f} | {m:.3f} |")
    return best, lines


def policy_gap(
    scores: list[float], labels: list[int], review_below: float
) -> tuple[float | None, float | None]:
    """Accuracy of the answers the review threshold lets through, and of those it flags
    (guards' hard failures aside: the confidence's own effect)."""
    through = [c for p, c in zip(scores, labels, strict=True) if p >= review_below]
    flagged = [c for p, c in zip(scores, labels, strict=True) if p < review_below]
    return (
        float(np.mean(through)) if through else None,
        float(np.mean(flagged)) if flagged else None,
    )


def no_answer_report(runs: Path, scorer: Callable[[list[LabelledAnswer]], list[float]]) -> None:
    policy = default_policy()
    for name in NO_ANSWER_SETS:
        run_dir = runs / name
        if not (run_dir / "dataset.jsonl").is_file():
            continue
        records = read_records(next(run_dir.glob("*/items.jsonl")))
        declined = sum(1 for r in records.values() if r.get("declined"))
        answers = load_run(run_dir)
        scores = scorer(answers) if answers else []
        withheld = sum(p < policy.abstain_below for p in scores)
        review = sum(policy.abstain_below <= p < policy.review_below for p in scores)
        print(
            f"\n{name} ({len(records)} questions, no passage holds the answer): the generator "
            f"declined {declined} ({declined / len(records):.2f}); of its answers the cascade "
            f"withholds {withheld}, sends {review} to review, lets "
            f"{len(scores) - withheld - review} through; declined or withheld "
            f"{(declined + withheld) / len(records):.2f}"
        )


def cost_report(
    answers: list[LabelledAnswer], first: list[float], band: tuple[float, float]
) -> dict[str, float]:
    judge_s = [a.record["timings"]["judge_s"] for a in answers if "judge_s" in a.record["timings"]]
    total_s = [a.record["timings"]["total_s"] for a in answers]
    share = float(np.mean([band[0] <= c <= band[1] for c in first]))
    median_judge = statistics.median(judge_s) if judge_s else float("nan")
    print(
        f"\nCost (this CPU, 8 questions in flight): the judge took {median_judge:.2f} s per judged "
        f"answer (median of {len(judge_s)}), answers {statistics.median(total_s):.2f} s in all "
        f"(median, judge included); the band judges {share:.2f} of answers: "
        f"+{share * median_judge:.2f} s per answer on average"
    )
    return {"judge_s_median": median_judge, "share_judged": share}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    answers = load_answers(args.runs, skip=NO_ANSWER_SETS)
    chain_for = chains(args.data_dir)
    first_view = Seen(samples=1, verification=False, judgement=False)
    rescore(answers, chain_for, first_view)
    directions = signal_directions([g for a in answers for g in chain_for(a).guards])
    options = FitOptions(
        directions=directions, l2=args.l2, standardize=True, per_set_intercepts=True
    )
    fixed = ConfidenceModel.load(args.stage1_from) if args.stage1_from else None
    sets = list(dict.fromkeys(a.dataset for a in answers))
    left_out = Validation(answers, options, lambda a: a.dataset, fixed)
    new_q = Validation(answers, options, lambda a: question_fold(a, 5), fixed)
    band, band_lines = choose_band(left_out, args.max_share)
    print(
        f"{len(answers)} labelled answers of {args.runs.name}; first stage "
        f"{f'fixed ({args.stage1_from.name})' if fixed else 'refitted, left out'}"
    )
    print("\nBands (pooled left-out first-stage scores): band | share judged | mean AUROC\n")
    print("\n".join(band_lines))
    print(f"chosen band: {band[0]:.2f}–{band[1]:.2f}")

    labels = labels_of(answers)
    review_below = args.review_below or default_policy().review_below
    print(f"(let through: cascade confidence >= {review_below})")
    first = by_set(answers, left_out.first)
    final = by_set(answers, left_out.scores(band))
    every = by_set(answers, left_out.scores((0.0, 1.0)))
    fresh = by_set(answers, new_q.scores(band))
    judge_alone = by_set(answers, [judged(a) if judged(a) is not None else 0.5 for a in answers])
    print(
        "\n| set | answers | right / wrong | accuracy | first stage AUROC (95 %) | judge alone "
        "| cascade AUROC (95 %) | judging all | ECE left out | ECE new questions "
        "| acc. let through / flagged (cascade) |"
    )
    print("| --- " * 11 + "|")
    report: dict[str, Any] = {"band": band, "sets": {}}
    for s in sets:
        y = labels[s]
        f1, fc = figures(s, first[s], y), figures(s, final[s], y)
        fnew = figures(s, fresh[s], y, uncertainty=False)
        through, flagged = policy_gap(final[s], y, review_below)
        right = sum(y)
        small = "" if min(right, len(y) - right) >= 30 else " (too few for an interval)"
        print(
            f"| {s} | {len(y)} | {right} / {len(y) - right}{small} | {fmt(f1.accuracy)} | "
            f"{fmt(f1.auroc)} ({interval(f1.auroc_interval)}) | {fmt(auroc(judge_alone[s], y))} | "
            f"**{fmt(fc.auroc)}** ({interval(fc.auroc_interval)}) | {fmt(auroc(every[s], y))} | "
            f"{fmt(fc.ece)} | {fmt(fnew.ece)} | {fmt(through)} / {fmt(flagged)} |"
        )
        report["sets"][s] = {
            "num_answers": len(y),
            "num_right": right,
            "accuracy": f1.accuracy,
            "auroc_first_stage": f1.auroc,
            "auroc_first_stage_interval": f1.auroc_interval,
            "auroc_judge_alone": auroc(judge_alone[s], y),
            "auroc_cascade": fc.auroc,
            "auroc_cascade_interval": fc.auroc_interval,
            "auroc_judging_all": auroc(every[s], y),
            "ece_left_out": fc.ece,
            "ece_new_questions": fnew.ece,
            "accuracy_let_through": through,
            "accuracy_flagged": flagged,
        }
    report["cost"] = cost_report(answers, left_out.first, band)
    pooled = [(c, a.correct) for c, a in zip(left_out.scores(band), answers, strict=True)]
    print("\nRisk-coverage of the left-out cascade confidence, all sets pooled:\n")
    print("| threshold | share at or above | accuracy at or above | accuracy below |")
    print("| --- | --- | --- | --- |")
    for t in (0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7):
        above = [y for c, y in pooled if c >= t]
        below = [y for c, y in pooled if c < t]
        print(
            f"| {t:.2f} | {len(above) / len(pooled):.2f} | "
            f"{fmt(float(np.mean(above)) if above else None)} | "
            f"{fmt(float(np.mean(below)) if below else None)} |"
        )
    stage1 = fixed or options.fit(answers)
    stage2 = fit_stage2(answers, left_out.first)
    print(f"\nSecond stage on every set: {json.dumps(stage2.weights)} bias {stage2.bias:+.3f}")

    def scorer(group: list[LabelledAnswer]) -> list[float]:
        rescore(group, chain_for, first_view)
        return cascade(group, [stage1.score(a.signals) for a in group], stage2, band)

    no_answer_report(args.runs, scorer)
    if args.write_model:
        trained_on = ",".join(f"{s}:{len(labels[s])}" for s in sets)
        notes: dict[str, float | str] = {
            "trained_on": trained_on,
            "judge_min_confidence": band[0],
            "judge_max_confidence": band[1],
        }
        retrain = f"python benchmarks/judge_cascade.py --runs DIR --write-model {args.write_model}"
        if args.abstain_below is not None and args.review_below is not None:
            notes.update({"abstain_below": args.abstain_below, "review_below": args.review_below})
        if fixed is None:
            stage1.notes.update({**notes, "retrain": retrain})
            stage1.save(shipped_confidence_path(args.write_model))
        stage2.notes.update({**notes, "retrain": retrain, "features": "first_stage, judge"})
        stage2.save(shipped_confidence_path(args.write_model, judged=True))
        print(f"wrote the {args.write_model} confidence files under {DATA}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=float))


if __name__ == "__main__":
    main()
