"""What tells right answers from wrong ones in a run: each signal alone, each guard's verdicts,
and the baselines a confidence has to beat."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from rag.eval.datasets import verdict_of
from rag.eval.items import EvalItem
from rag.eval.metrics import answer_matches, auroc, finite_or_none, share_true

Pair = tuple[EvalItem, dict[str, Any]]


def mean_logprob(record: dict[str, Any]) -> float | None:
    """Mean token log-probability of the recorded answer (the baseline every signal must beat)."""
    samples = record.get("samples") or []
    logprobs = samples[0].get("token_logprobs", []) if samples else []
    return sum(logprobs) / len(logprobs) if logprobs else None


def signal_metrics(scored: list[tuple[dict[str, Any], int]]) -> dict[str, Any]:
    """AUROC of each recorded signal alone (absent = 0, its neutral value), the share of answers
    it was measured on, and the mean-token-logprob baseline."""
    names = sorted({k for r, _ in scored for k in r.get("signals", {})})
    labels = [c for _, c in scored]
    signals = {
        name: {
            "auroc": finite_or_none(
                auroc([r.get("signals", {}).get(name, 0.0) for r, _ in scored], labels)
            ),
            "share_measured": sum(name in r.get("signals", {}) for r, _ in scored) / len(scored),
        }
        for name in names
    }
    logprobs = [mean_logprob(r) for r, _ in scored]
    baseline = finite_or_none(auroc([-99.0 if v is None else v for v in logprobs], labels))
    return {"signals": signals, "auroc_mean_logprob": baseline}


def verdict_accuracy(scored: list[tuple[dict[str, Any], int]]) -> dict[str, dict[str, Any]]:
    """Per guard and outcome: how many answers, and how many of them were right."""
    groups: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for record, correct in scored:
        for v in record.get("guards", []):
            groups[v["name"]][v["outcome"]].append(correct)
    return {
        name: {
            outcome: {"count": len(cs), "accuracy": sum(cs) / len(cs)}
            for outcome, cs in sorted(by_outcome.items())
        }
        for name, by_outcome in sorted(groups.items())
    }


def yes_no_metrics(pairs: list[Pair]) -> dict[str, Any] | None:
    """For yes/no sets: the answers' verdicts, the gold ones, and the majority-class baseline."""
    yes_no = [(item, r) for item, r in pairs if item.answer_type == "yes_no" and item.answers]
    if not yes_no:
        return None
    gold = Counter(item.answers[0].strip().casefold() for item, _ in yes_no)
    said = Counter(verdict_of(r["answer"]) or "none" for _, r in yes_no)
    majority, count = gold.most_common(1)[0]
    return {
        "gold_distribution": dict(gold),
        "answer_distribution": dict(said),
        "majority_class": majority,
        "majority_baseline_accuracy": count / len(yes_no),
    }


def repeats_wrong_answer(item: EvalItem, answer: str) -> bool:
    """Does the answer state one of the item's known wrong answers (as a whole phrase: a
    partial word overlap with a counterfactual is not a repeat)?"""
    return answer_matches(answer, item.wrong_answers, min_f1=1.1)


def counterfactual_metrics(pairs: list[Pair]) -> dict[str, Any] | None:
    """For sets with known wrong answers (RGB's counterfactuals): how often an answer repeats
    one, and what the policy did with those."""
    known = [(item, r) for item, r in pairs if item.wrong_answers and not r.get("declined")]
    if not known:
        return None
    repeats = [r for item, r in known if repeats_wrong_answer(item, r["answer"])]
    decisions = Counter(r["decision"] for r in repeats)
    return {
        "num_answers": len(known),
        "repeats_counterfactual": len(repeats),
        "repeats_counterfactual_rate": len(repeats) / len(known),
        "repeats_answered_rate": share_true([r["decision"] == "answer" for r in repeats]),
        "repeats_decisions": dict(decisions),
    }


def judgement_metrics(pairs: list[Pair], labels: dict[str, int]) -> dict[str, Any] | None:
    """Everything above for the generated answers with a correctness label (``labels``: item id
    to 1/0), plus the right answers the policy flagged."""
    scored = [(r, labels[item.id]) for item, r in pairs if item.id in labels]
    if not scored:
        return None
    flagged_right = [
        {"id": item.id, "question": item.question, "answer": r["answer"], "decision": r["decision"]}
        for item, r in pairs
        if labels.get(item.id) == 1 and r["decision"] != "answer"
    ]
    return {
        **signal_metrics(scored),
        "verdict_accuracy": verdict_accuracy(scored),
        "yes_no": yes_no_metrics(pairs),
        "counterfactual": counterfactual_metrics(pairs),
        "num_right_flagged": len(flagged_right),
        "right_flagged": flagged_right[:10],
    }
