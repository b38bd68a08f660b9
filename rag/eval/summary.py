"""Every figure of one configuration's run, computed from its records.

An answer is *correct* when it contains a gold answer as a whole phrase or matches one with token
F1 >= 0.6 (``answer_matches``); for ``yes_no`` items when its yes / no / maybe is the gold one;
for labelled items when the label says the given answer is right. A declined answer ("I don't
know", or no passage relevant enough) is not correct. Rates whose denominator is empty are None.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from guards.answers import states_no_answer
from guards.confidence import expected_calibration_error
from rag.eval.datasets import verdict_of
from rag.eval.items import EvalItem
from rag.eval.judgement import judgement_metrics
from rag.eval.metrics import (
    answer_matches,
    area_under_risk_coverage,
    auroc,
    auroc_interval,
    best_token_f1,
    contains_gold,
    ece_noise,
    exact_match,
    finite_or_none,
    percentiles,
    recall_at_k,
    reciprocal_rank,
    reliability_bins,
    risk_coverage,
    share_true,
)

RECALL_KS = (1, 3, 5, 10)
LATENCIES = ("time_to_first_token_s", "total_s", "generate_s", "retrieve_s", "guards_s")
NUM_FAILURES = 10
RISK_COVERAGE_STEPS = 20


def is_correct(item: EvalItem, answer: str) -> bool | None:
    """Is ``answer`` right for ``item``? None when the item has no gold answer."""
    if item.is_labelled:
        return item.label == 1
    if not item.answerable:
        return states_no_answer(answer)
    if not item.answers:
        return None
    if item.answer_type == "yes_no":
        return verdict_of(answer) == item.answers[0].strip().casefold()
    return answer_matches(answer, item.answers)


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if len(values) else None


def retrieval_metrics(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    ranked = [r["gold_ranks"] for r in records if r.get("gold_ranks")]
    if not ranked:
        return None
    shown = [r["gold_ranks_in_context"] for r in records if r.get("gold_ranks_in_context")]
    return {
        "num_items": len(ranked),
        **{f"recall@{k}": _mean([recall_at_k(g, k) for g in ranked]) for k in RECALL_KS},
        "mrr@10": _mean([reciprocal_rank(g) for g in ranked]),
        "all_gold@10": share_true([all(r is not None for r in g) for g in ranked]),
        "context_recall": _mean([recall_at_k(g, 10**6) for g in shown]),
    }


def answer_metrics(pairs: list[tuple[EvalItem, dict[str, Any]]]) -> dict[str, Any] | None:
    scored = [
        (item, r)
        for item, r in pairs
        if not item.is_labelled and (item.answers or not item.answerable)
    ]
    if not scored:
        return None
    free = [
        (item, r["answer"]) for item, r in scored if item.answer_type == "free" and item.answers
    ]
    unanswerable = [r for item, r in scored if not item.answerable]
    with_wrong = [(item, r["answer"]) for item, r in scored if item.wrong_answers]
    return {
        "num_items": len(scored),
        "accuracy": share_true([bool(is_correct(item, r["answer"])) for item, r in scored]),
        "exact_match": share_true([exact_match(a, item.answers) for item, a in free]),
        "token_f1": _mean([best_token_f1(a, item.answers) for item, a in free]),
        "contains_gold": share_true([contains_gold(a, item.answers) for item, a in free]),
        "wrong_answer_rate": share_true(
            [contains_gold(a, item.wrong_answers) for item, a in with_wrong]
        ),
        "num_unanswerable": len(unanswerable),
        "declined_unanswerable": share_true([states_no_answer(r["answer"]) for r in unanswerable]),
    }


def decision_metrics(pairs: list[tuple[EvalItem, dict[str, Any]]]) -> dict[str, Any]:
    """How often the policy answers, sends to review or withholds, and how right each group is."""
    counts = Counter("declined" if r["declined"] else r["decision"] for _, r in pairs)
    n = len(pairs)
    by_decision: dict[str, list[bool]] = defaultdict(list)
    for item, r in pairs:
        correct = is_correct(item, r["answer"])
        if correct is not None and not r["declined"]:
            by_decision[r["decision"]].append(correct)
    flagged = by_decision["review"] + by_decision["abstain"]
    return {
        "num_items": n,
        "answer_rate": counts["answer"] / n if n else None,
        "review_rate": counts["review"] / n if n else None,
        "abstain_rate": counts["abstain"] / n if n else None,
        "declined_rate": counts["declined"] / n if n else None,
        "accuracy_answered": share_true(by_decision["answer"]),
        "accuracy_review": share_true(by_decision["review"]),
        "accuracy_abstain": share_true(by_decision["abstain"]),
        "accuracy_flagged": share_true(flagged),
    }


def _pair(bounds: tuple[float, float] | None) -> list[float] | None:
    """A (low, high) pair as JSON has it (a list), so the figures compare equal to what
    results.json reads back."""
    return None if bounds is None else [bounds[0], bounds[1]]


def confidence_metrics(pairs: list[tuple[EvalItem, dict[str, Any]]]) -> dict[str, Any] | None:
    """How well the confidence ranks and estimates correctness (declined answers excluded)."""
    scored = [
        (r["confidence"], int(c))
        for item, r in pairs
        if r.get("confidence") is not None and (c := is_correct(item, r["answer"])) is not None
    ]
    if not scored:
        return None
    confidence = [s for s, _ in scored]
    correct = [c for _, c in scored]
    return {
        "num_items": len(scored),
        "mean_confidence": _mean(confidence),
        "accuracy": _mean(correct),
        "auroc": finite_or_none(auroc(confidence, correct)),
        "auroc_interval": _pair(auroc_interval(confidence, correct)),
        "aurc": area_under_risk_coverage(confidence, correct),
        "ece": expected_calibration_error(confidence, correct),
        "ece_noise": _pair(ece_noise(confidence)),
        "reliability": [
            [b.lower, b.upper, b.count, b.mean_confidence, b.accuracy]
            for b in reliability_bins(confidence, correct)
        ],
        "risk_coverage": [
            [p.coverage, p.accuracy, p.threshold]
            for p in risk_coverage(confidence, correct, steps=min(RISK_COVERAGE_STEPS, len(scored)))
        ],
    }


def guard_counts(records: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for r in records:
        for verdict in r.get("guards", []):
            counts[verdict["name"]][verdict["outcome"]] += 1
    return {name: dict(sorted(c.items())) for name, c in sorted(counts.items())}


def latency_metrics(records: list[dict[str, Any]], elapsed_s: float | None) -> dict[str, Any]:
    timings = [r.get("timings", {}) for r in records]
    latency: dict[str, Any] = {
        name: percentiles([t[name] for t in timings if name in t]) for name in LATENCIES
    }
    generated = [r for r in records if r.get("usage", {}).get("completion_tokens")]
    latency["tokens_per_s"] = percentiles(
        [
            r["usage"]["completion_tokens"] / r["timings"]["generate_s"]
            for r in generated
            if r["timings"].get("generate_s")
        ]
    )
    tokens = sum(r["usage"]["completion_tokens"] for r in generated)
    latency["completion_tokens"] = tokens
    latency["prompt_tokens"] = sum(r.get("usage", {}).get("prompt_tokens", 0) for r in records)
    latency["elapsed_s"] = elapsed_s
    latency["throughput_tokens_per_s"] = tokens / elapsed_s if elapsed_s else None
    return {k: v for k, v in latency.items() if v != {}}


def worst_failures(
    pairs: list[tuple[EvalItem, dict[str, Any]]], limit: int = NUM_FAILURES
) -> list[dict[str, Any]]:
    """Wrong answers, worst first: those let through before those flagged, the more confident
    first; declined ones are not failures of this kind."""
    wrong = [
        (item, r)
        for item, r in pairs
        if not r["declined"] and is_correct(item, r["answer"]) is False
    ]
    order = {"answer": 0, "review": 1, "abstain": 2}
    wrong.sort(key=lambda p: (order.get(p[1]["decision"], 3), -(p[1].get("confidence") or 0.0)))
    return [
        {
            "id": item.id,
            "question": item.question,
            "gold": list(item.answers),
            "answer": r["answer"],
            "label": item.label,
            "decision": r["decision"],
            "confidence": r.get("confidence"),
            "guards": r.get("guards", []),
            "passages": r.get("passages", [])[:4],
        }
        for item, r in wrong[:limit]
    ]


def summarise(
    items: list[EvalItem], records: dict[str, dict[str, Any]], elapsed_s: float | None = None
) -> dict[str, Any]:
    """Every metric over the items that have a record (in the items' order)."""
    done = [(item, records[item.id]) for item in items if item.id in records]
    ok = [(item, r) for item, r in done if "error" not in r]
    generated = [(item, r) for item, r in ok if not item.is_labelled]
    labelled = [(item, r) for item, r in ok if item.is_labelled]
    ok_records = [r for _, r in ok]
    summary: dict[str, Any] = {
        "counts": {
            "items": len(items),
            "done": len(done),
            "errors": len(done) - len(ok),
            "generated": len(generated),
            "labelled": len(labelled),
        },
        "retrieval": retrieval_metrics(ok_records),
        "answers": answer_metrics(generated),
        "decisions": decision_metrics(generated) if generated else None,
        "confidence": confidence_metrics(generated),
        "labelled": confidence_metrics(labelled),
        "guards": guard_counts(ok_records),
        "judgement": judgement_metrics(
            generated,
            {
                item.id: int(c)
                for item, r in generated
                if not r["declined"] and (c := is_correct(item, r["answer"])) is not None
            },
        ),
        "latency": latency_metrics([r for _, r in generated], elapsed_s) if generated else None,
        "failures": worst_failures(ok),
        "errors": [{"id": r["id"], "error": r["error"]} for _, r in done if "error" in r][:20],
    }
    if labelled:
        summary["labelled"] = (summary["labelled"] or {}) | label_decisions(labelled)
    return summary


def label_decisions(pairs: list[tuple[EvalItem, dict[str, Any]]]) -> dict[str, Any]:
    """What the policy did with right and with hallucinated given answers."""
    right = [r["decision"] for item, r in pairs if item.label == 1]
    wrong = [r["decision"] for item, r in pairs if item.label == 0]
    return {
        "decisions": decision_metrics(pairs),
        "hallucinations_passed": share_true([d == "answer" for d in wrong]),
        "right_answers_flagged": share_true([d != "answer" for d in right]),
    }
