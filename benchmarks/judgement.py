"""Judgement: how well each signal and the combined confidence tell right answers from wrong ones.

Reads labelled generations (``ragguard eval`` output folders, one per data set, made with the
default pipeline: see docs/benchmarks.md for the command), re-runs today's guards on the recorded
answers offline, and prints per data set: each signal's AUROC alone, the mean-token-logprob
baseline, the hand-set prior, and the fitted confidence validated leave-one-data-set-out (fitted
on every other set, scored on this one). ``--write-model`` then fits on all sets and writes the
shipped default (``rag/data/confidence.json``).

    python benchmarks/judgement.py --runs eval-runs/labelled --write-model
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.research.training import (  # noqa: E402
    EVERYTHING,
    FitOptions,
    LabelledAnswer,
    Recorded,
    cross_fit_by_question,
    figures,
    leave_one_set_out,
    load_run,
    rescore,
    selective_accuracy,
    signal_auroc,
)
from guards import ConfidenceModel, GuardChain, KnowledgeGraph, Policy  # noqa: E402
from guards.registry import GuardDeps, build_guards, signal_directions  # noqa: E402
from rag.eval.judgement import repeats_wrong_answer  # noqa: E402
from rag.eval.metrics import auroc  # noqa: E402
from rag.eval.records import read_records  # noqa: E402
from rag.settings import Settings  # noqa: E402
from rag.stages.check import AnswerChecker  # noqa: E402

DEFAULT_DATA_DIR = ROOT.parent / "shared" / "data"
MODEL_PATH = ROOT / "rag" / "data" / "confidence.json"
DEFAULT_L2 = 10.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, required=True, help="folder of <set>/ eval outputs")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--l2", type=float, default=DEFAULT_L2, help="ridge penalty of the fit")
    parser.add_argument(
        "--plain-fit",
        action="store_true",
        help="fit on raw signals with one intercept (default: standardised signals, an "
        "intercept per data set while fitting the weights)",
    )
    parser.add_argument(
        "--all-recorded",
        action="store_true",
        help="let the guards see every recorded sample and the self-verification probability "
        "(default: only what the default settings ask for: RAGGUARD_NUM_CANDIDATES answers, "
        "P(yes) only with RAGGUARD_SELF_VERIFICATION)",
    )
    parser.add_argument("--write-model", action="store_true", help=f"write {MODEL_PATH.name}")
    parser.add_argument("--model-path", type=Path, default=MODEL_PATH)
    parser.add_argument(
        "--no-answer-runs",
        type=Path,
        help="folder of <set>/ eval outputs whose passages hold no answer (rgb_noise): the "
        "share the fitted model and the default policy withhold, send to review, or let through",
    )
    return parser.parse_args(argv)


def chains(data_dir: Path) -> Any:
    """A guard chain per data set: MetaQA's answers against its movie graph, others the demo's."""
    from rag.eval.prepare import prepare_metaqa
    from rag.retrieval.embed import Embedder

    settings = Settings()
    embedder = Embedder(settings.retrieval.embedding_model)
    graphs: dict[str, KnowledgeGraph | None] = {"default": AnswerChecker._load_graph(settings)}
    built: dict[str, GuardChain] = {}

    def chain_for(answer: LabelledAnswer) -> GuardChain:
        graph = "metaqa" if answer.dataset == "metaqa" else "default"
        if graph not in built:
            if graph not in graphs:
                load = prepare_metaqa(data_dir).load_graph
                assert load is not None
                graphs[graph] = load()
            deps = GuardDeps(embedder=embedder, graph=graphs[graph])
            built[graph] = GuardChain(build_guards(None, deps), audit=None)
        return built[graph]

    return chain_for


def fmt(v: float | None) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"


def interval(bounds: tuple[float, float] | None) -> str:
    return "—" if bounds is None else f"{bounds[0]:.2f}–{bounds[1]:.2f}"


def load_answers(
    runs: Path, *, skip: Sequence[str] = (), per_set: int | None = None
) -> list[LabelledAnswer]:
    """The labelled answers of every ``<set>/`` eval output folder under ``runs`` that has
    records (a run still starting has none), but the sets in ``skip``; at most ``per_set`` of
    each."""
    answers: list[LabelledAnswer] = []
    for run_dir in sorted(p for p in runs.iterdir() if any(p.glob("*/items.jsonl"))):
        if run_dir.name not in skip:
            answers += load_run(run_dir)[:per_set]
    if not answers:
        raise SystemExit(f"no labelled answers under {runs}")
    return answers


def default_seen() -> Recorded:
    """What a pipeline with the default settings shows the guards: RAGGUARD_NUM_CANDIDATES
    answers, and P(yes) only with RAGGUARD_SELF_VERIFICATION."""
    defaults = Settings()
    return Recorded(samples=defaults.num_candidates, verification=defaults.self_verification)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    answers = load_answers(args.runs)
    chain_for = chains(args.data_dir)
    seen = EVERYTHING if args.all_recorded else default_seen()
    rescore(answers, chain_for, seen)
    standardize = per_set = not args.plain_fit
    sets = list(dict.fromkeys(a.dataset for a in answers))
    by_set = {s: [a for a in answers if a.dataset == s] for s in sets}
    names = sorted({k for a in answers for k in a.signals})
    directions = signal_directions([g for a in answers for g in chain_for(a).guards])
    options = FitOptions(
        directions=directions, l2=args.l2, standardize=standardize, per_set_intercepts=per_set
    )
    loso = leave_one_set_out(answers, options)
    new_questions = cross_fit_by_question(answers, options)
    prior = ConfidenceModel.prior()
    report: dict[str, Any] = {"sets": {}, "signals": {}}

    print(
        f"{len(answers)} labelled answers; l2 {args.l2}; guards saw {seen}; "
        f"standardised {standardize}, intercept per set {per_set}\n"
    )
    print(
        "| set | answers | accuracy | confidence AUROC (left out) | its 95 % interval | ECE "
        "| ECE by chance (median–95 %) | acc. top 50 % | AUROC (new questions) | ECE "
        "| acc. top 50 % | prior AUROC | mean logprob AUROC | best signal |"
    )
    print("| --- " * 14 + "|")
    for s in sets:
        group = by_set[s]
        labels = [a.correct for a in group]
        fig = figures(s, loso[s], labels)
        new = figures(s, new_questions[s], labels, uncertainty=False)
        base = [a.mean_logprob if a.mean_logprob is not None else -99.0 for a in group]
        prior_fig = figures(s, [prior.score(a.signals) for a in group], labels, uncertainty=False)
        base_fig = figures(s, base, labels, uncertainty=False)
        per_signal = {n: signal_auroc(group, n) for n in names}
        best = max(
            per_signal,
            key=lambda n: abs(per_signal[n] - 0.5) if not math.isnan(per_signal[n]) else -1,
        )
        print(
            f"| {s} | {fig.num_answers} | {fmt(fig.accuracy)} | **{fmt(fig.auroc)}** | "
            f"{interval(fig.auroc_interval)} | {fmt(fig.ece)} | {interval(fig.ece_noise)} | "
            f"{fmt(fig.accuracy_at_half)} | **{fmt(new.auroc)}** | "
            f"{fmt(new.ece)} | {fmt(new.accuracy_at_half)} | {fmt(prior_fig.auroc)} | "
            f"{fmt(base_fig.auroc)} | {best} {fmt(per_signal[best])} |"
        )
        report["sets"][s] = {
            "num_answers": fig.num_answers,
            "accuracy": fig.accuracy,
            "auroc_left_out": fig.auroc,
            "auroc_left_out_interval": fig.auroc_interval,
            "ece_left_out": fig.ece,
            "ece_noise_left_out": fig.ece_noise,
            "accuracy_top_half": fig.accuracy_at_half,
            "auroc_new_questions": new.auroc,
            "ece_new_questions": new.ece,
            "auroc_prior": prior_fig.auroc,
            "auroc_mean_logprob": base_fig.auroc,
            "signal_auroc": per_signal,
        }

    print("\nPer-signal AUROC (alone; 0.5 = chance, below 0.5 = points the wrong way)\n")
    print("| signal | " + " | ".join(sets) + " | share measured |")
    print("| --- | " + " | ".join("---" for _ in sets) + " | --- |")
    for n in names:
        measured = np.mean([n in a.signals for a in answers])
        cells = [fmt(report["sets"][s]["signal_auroc"][n]) for s in sets]
        print(f"| {n} | " + " | ".join(cells) + f" | {measured:.2f} |")
        report["signals"][n] = {"share_measured": float(measured)}

    print("\nRisk-coverage of the left-out confidence, all sets pooled (choose the thresholds):\n")
    print("| threshold | share at or above | accuracy at or above | accuracy below |")
    print("| --- | --- | --- | --- |")
    pooled_loso = [
        (score, a.correct) for s in sets for score, a in zip(loso[s], by_set[s], strict=True)
    ]
    for t in (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6):
        above = [c for p, c in pooled_loso if p >= t]
        below = [c for p, c in pooled_loso if p < t]
        print(
            f"| {t:.2f} | {len(above) / len(pooled_loso):.2f} | "
            f"{fmt(float(np.mean(above)) if above else None)} | "
            f"{fmt(float(np.mean(below)) if below else None)} |"
        )
    fit_report(answers, sets, by_set, options)
    policy_report(sets, by_set, loso)
    model = options.fit(answers)
    print("\nWeights fitted on all sets:")
    for n, w in sorted(model.weights.items(), key=lambda kv: -abs(kv[1])):
        print(f"  {n:22s} {w:+.3f}")
    print(f"  {'bias':22s} {model.bias:+.3f}")
    pooled = [model.score(a.signals) for a in answers]
    all_labels = [a.correct for a in answers]
    print(
        f"\nin-sample (all sets): accuracy at 50 % coverage "
        f"{selective_accuracy(pooled, all_labels, 0.5):.3f} vs {np.mean(all_labels):.3f}"
    )
    known_wrong_report(sets, by_set, loso)
    if args.no_answer_runs:
        no_answer_report(args.no_answer_runs, model, chain_for, seen)
    if args.write_model:
        model.notes.update(
            {
                "trained_on": ",".join(f"{s}:{len(by_set[s])}" for s in sets),
                "validation": "leave one data set out, and 5 folds by question: docs/benchmarks.md",
                "retrain": "python benchmarks/judgement.py --runs DIR --write-model",
            }
        )
        args.model_path.parent.mkdir(parents=True, exist_ok=True)
        model.save(args.model_path)
        print(f"wrote {args.model_path}")
    print(json.dumps(report, default=float))


def fit_report(
    answers: list[LabelledAnswer],
    sets: list[str],
    by_set: dict[str, list[LabelledAnswer]],
    options: FitOptions,
) -> None:
    """AUROC per set of each way of fitting, side by side on the same signals: left out
    (a set never seen) / new questions (5 folds by question)."""
    print("\nAUROC by way of fitting, left out / new questions (same signals, same sign rule):\n")
    print("| fit | " + " | ".join(sets) + " | mean |")
    print("| --- | " + " | ".join("---" for _ in sets) + " | --- |")
    for standardize in (False, True):
        for per_set in (False, True):
            way = replace(options, standardize=standardize, per_set_intercepts=per_set)
            loso, new = leave_one_set_out(answers, way), cross_fit_by_question(answers, way)
            aurocs = [auroc(loso[s], [a.correct for a in by_set[s]]) for s in sets]
            fresh = [auroc(new[s], [a.correct for a in by_set[s]]) for s in sets]
            cells = [f"{fmt(a)} / {fmt(b)}" for a, b in zip(aurocs, fresh, strict=True)]
            means = f"{fmt(float(np.mean(aurocs)))} / {fmt(float(np.mean(fresh)))}"
            scaling = "standardised" if standardize else "raw"
            name = f"{scaling}, {'per-set' if per_set else 'one'} intercept"
            print(f"| {name} | " + " | ".join(cells) + f" | {means} |")


def default_policy() -> Policy:
    """The policy with the default settings' thresholds."""
    settings = Settings()
    return Policy(
        abstain_below=settings.policy.abstain_below, review_below=settings.policy.review_below
    )


def policy_report(
    sets: list[str], by_set: dict[str, list[LabelledAnswer]], loso: dict[str, list[float]]
) -> None:
    """The default policy applied to the left-out confidences and the guards' verdicts."""
    policy = default_policy()
    thresholds = f"{policy.abstain_below} / {policy.review_below}"
    print(f"\nThe policy ({thresholds}) on left-out scores:\n")
    print("| set | answered | acc. answered | acc. review | withheld | acc. withheld |")
    print("| --- | --- | --- | --- | --- | --- |")
    for s in sets:
        acts: dict[str, list[int]] = {"answer": [], "review": [], "abstain": []}
        for a, score in zip(by_set[s], loso[s], strict=True):
            acts[policy.decide(a.results, score).action.value].append(a.correct)
        n = len(by_set[s])

        def acc(v: list[int]) -> str:
            return fmt(float(np.mean(v)) if v else None)

        print(
            f"| {s} | {len(acts['answer']) / n:.2f} | {acc(acts['answer'])} | "
            f"{acc(acts['review'])} | {len(acts['abstain']) / n:.2f} | {acc(acts['abstain'])} |"
        )


def known_wrong_report(
    sets: list[str], by_set: dict[str, list[LabelledAnswer]], loso: dict[str, list[float]]
) -> None:
    """What the default policy does, on left-out confidences, with answers that repeat a known
    wrong answer (RGB's counterfactual passages' claim)."""
    policy = default_policy()
    for s in sets:
        scored = [(a, p) for a, p in zip(by_set[s], loso[s], strict=True) if a.item.wrong_answers]
        if not scored:
            continue
        repeats = [(a, p) for a, p in scored if repeats_wrong_answer(a.item, a.answer)]
        actions = [policy.decide(a.results, p).action.value for a, p in repeats]
        counts = ", ".join(f"{k} {actions.count(k)}" for k in ("answer", "review", "abstain"))
        print(
            f"\nAnswers repeating a known wrong answer ({s}): {len(repeats)} of {len(scored)}; "
            f"the policy on their left-out confidence: {counts}"
        )


def no_answer_report(
    runs: Path, model: ConfidenceModel, chain_for: Any, seen: Recorded = EVERYTHING
) -> None:
    """What the policy does with answers to questions whose passages hold no answer."""
    policy = default_policy()
    for run_dir in sorted(p for p in runs.iterdir() if (p / "dataset.jsonl").is_file()):
        records = read_records(next(run_dir.glob("*/items.jsonl")))
        declined = sum(1 for r in records.values() if r.get("declined"))
        answers = load_run(run_dir)
        rescore(answers, chain_for, seen)
        actions = [policy.decide(a.results, model.score(a.signals)).action.value for a in answers]
        counts = {k: actions.count(k) for k in ("abstain", "review", "answer")}
        held = declined + counts["abstain"]
        print(
            f"\nNo answer in the passages ({run_dir.name}, {len(records)} questions): declined "
            f"{declined}, withheld {counts['abstain']}, review {counts['review']}, answered "
            f"{counts['answer']}; withheld or declined {held / len(records):.2f} "
            f"(thresholds {policy.abstain_below} / {policy.review_below})"
        )


if __name__ == "__main__":
    main()
