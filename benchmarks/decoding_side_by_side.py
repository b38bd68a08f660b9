"""Two configurations of one ``ragguard eval`` run, question by question: accuracy and its change
with a paired bootstrap interval, the share of answers the grounding guard calls supported, the
answer time, and how well each one's confidence ranks its own answers (AUROC; its change with a
paired bootstrap interval over the questions both scored).

Reads ``OUT/dataset.jsonl`` and ``OUT/<config>/items.jsonl`` of runs made with two ``--config``
files (e.g. int8.toml beside context_aware.toml), for every ``OUT`` given; only questions both
configurations answered count (``errors`` says how many records of each had no answer).

    python benchmarks/decoding_side_by_side.py --baseline int8 --other context_aware \\
        eval-runs/musique eval-runs/squad2

The AUROC compares the confidence each answer was given. When that confidence was fitted on
these very questions (a profile's shipped file, fitted on labelled answers to the same sets),
the baseline's answers, which the fit saw, rank better than they would on new questions, and the
comparison favours it. ``--rescore FILE`` scores every answer's recorded signals with another
fitted first stage instead (one not fitted on these questions), the same file for both:

    python benchmarks/decoding_side_by_side.py --baseline qwen1.5b \\
        --other qwen1.5b-context-aware --rescore rag/data/confidence.json eval-runs/squad2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BOOTSTRAP = 10_000


def records(path: Path) -> dict[str, dict[str, Any]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return {r["id"]: r for r in (json.loads(line) for line in lines if line.strip())}


def supported(record: dict[str, Any]) -> bool:
    """The grounding guard passed the answer (every sentence supported by a passage)."""
    return any(g["name"] == "grounding" and g["outcome"] == "pass" for g in record["guards"])


def rescored(recs: dict[str, dict[str, Any]], path: Path) -> dict[str, dict[str, Any]]:
    """The records with each scored answer's confidence recomputed from its recorded signals by
    the fitted confidence at ``path`` (a declined answer keeps having none)."""
    from guards.confidence import ConfidenceModel

    model = ConfidenceModel.load(path)
    return {
        i: r if r.get("confidence") is None else {**r, "confidence": model.score(r["signals"])}
        for i, r in recs.items()
    }


def compare(
    run: Path, baseline: str, other: str, seed: int, rescore: Path | None = None
) -> dict[str, Any]:
    from rag.eval.items import read_items
    from rag.eval.summary import is_correct

    items = {item.id: item for item in read_items(run / "dataset.jsonl")}
    first, second = records(run / baseline / "items.jsonl"), records(run / other / "items.jsonl")
    if rescore is not None:
        first, second = rescored(first, rescore), rescored(second, rescore)
    both = [i for i in first if i in second and i in items]
    # An item whose generation failed (a deadline, an engine error) has an error, not an answer:
    # it is counted apart, and the pair is left out of the paired comparison.
    errors = {
        name: sum("answer" not in recs[i] for i in both)
        for name, recs in ((baseline, first), (other, second))
    }
    ids = [i for i in both if "answer" in first[i] and "answer" in second[i]]
    verdicts = {}  # item id -> (baseline right, other right), where both can be judged
    for item_id in ids:
        a = is_correct(items[item_id], first[item_id]["answer"])
        b = is_correct(items[item_id], second[item_id]["answer"])
        if a is not None and b is not None:
            verdicts[item_id] = (a, b)
    right = np.array(list(verdicts.values()), dtype=float).reshape(-1, 2)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(right), size=(BOOTSTRAP, len(right)))
    deltas = right[draws, 1].mean(axis=1) - right[draws, 0].mean(axis=1)
    low, high = np.percentile(deltas, [2.5, 97.5])

    confidence = confidence_change(first, second, verdicts, rng)

    def seconds(recs: dict[str, dict[str, Any]]) -> float:
        return statistics.median(recs[i]["timings"]["total_s"] for i in ids)

    return {
        "set": run.name,
        "questions": len(right),
        baseline: {
            "accuracy": float(right[:, 0].mean()),
            "supported": statistics.mean(supported(first[i]) for i in ids),
            "answer_s_median": seconds(first),
        },
        other: {
            "accuracy": float(right[:, 1].mean()),
            "supported": statistics.mean(supported(second[i]) for i in ids),
            "answer_s_median": seconds(second),
        },
        "accuracy_change": float(right[:, 1].mean() - right[:, 0].mean()),
        "accuracy_change_95": [float(low), float(high)],
        "changed_answers": sum(first[i]["answer"] != second[i]["answer"] for i in ids),
        "errors": errors,
        "confidence_auroc": confidence,
        "confidence_from": str(rescore) if rescore is not None else "recorded",
    }


def confidence_change(
    first: dict[str, dict[str, Any]],
    second: dict[str, dict[str, Any]],
    verdicts: dict[str, tuple[bool, bool]],
    rng: np.random.Generator,
) -> dict[str, Any] | None:
    """Each configuration's confidence AUROC against its own answers' correctness, on the
    questions both scored (a declined answer has no confidence), and the change's 95 % interval:
    the same questions drawn for both in each bootstrap draw (draws lacking a right or a wrong
    answer in either are skipped)."""
    from rag.eval.metrics import auroc

    rows = [
        (first[i]["confidence"], int(right_a), second[i]["confidence"], int(right_b))
        for i, (right_a, right_b) in verdicts.items()
        if first[i].get("confidence") is not None and second[i].get("confidence") is not None
    ]
    if not rows:
        return None
    table = np.array(rows, dtype=float)

    def aurocs(sample: np.ndarray) -> tuple[float, float]:
        return (
            auroc(sample[:, 0].tolist(), sample[:, 1].astype(int).tolist()),
            auroc(sample[:, 2].tolist(), sample[:, 3].astype(int).tolist()),
        )

    draws = []
    for _ in range(BOOTSTRAP // 10):  # each draw sorts; a thousand keep this a second
        sample = table[rng.integers(0, len(table), size=len(table))]
        before, after = aurocs(sample)
        change = after - before
        if np.isfinite(change):
            draws.append(change)
    baseline, other = aurocs(table)
    low, high = np.percentile(draws, [2.5, 97.5]) if draws else (float("nan"),) * 2
    return {
        "questions": len(table),
        "baseline": baseline,
        "other": other,
        "change": other - baseline,
        "change_95": [float(low), float(high)],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--baseline", default="int8")
    parser.add_argument("--other", default="context_aware")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--rescore",
        type=Path,
        default=None,
        metavar="FILE",
        help="score both configurations' answers with this fitted confidence for the AUROC "
        "(default: the confidence recorded with each answer)",
    )
    args = parser.parse_args(argv)
    for run in args.runs:
        print(json.dumps(compare(run, args.baseline, args.other, args.seed, args.rescore)))


if __name__ == "__main__":
    main()
