"""``ragguard eval``: measure retrieval, answers, guards and speed on a QA dataset.

Imports are lazy so that ``ragguard --help`` stays fast.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from rag.cli.console import note, out

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data"
BUILTIN_NAMES = (
    "musique",
    "hotpotqa",
    "pubmedqa",
    "metaqa",
    "halueval",
    "halueval_ask",
    "rgb",
    "rgb_noise",
    "squad2",
)
SUMMARY = (
    ("accuracy", ("answers", "accuracy")),
    ("EM", ("answers", "exact_match")),
    ("F1", ("answers", "token_f1")),
    ("wrong", ("answers", "wrong_answer_rate")),
    ("declined(unans.)", ("answers", "declined_unanswerable")),
    ("R@5", ("retrieval", "recall@5")),
    ("MRR", ("retrieval", "mrr@10")),
    ("answered", ("decisions", "answer_rate")),
    ("acc.answered", ("decisions", "accuracy_answered")),
    ("AUROC", ("confidence", "auroc")),
    ("ECE", ("confidence", "ece")),
    ("AUROC(label)", ("labelled", "auroc")),
    ("ECE(label)", ("labelled", "ece")),
    ("halluc.passed", ("labelled", "hallucinations_passed")),
    ("e2e p50 s", ("latency", "total_s", "p50")),
    ("tok/s", ("latency", "throughput_tokens_per_s")),
)


def _value(metrics: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(metrics, dict):
            return None
        metrics = metrics.get(key)  # type: ignore[assignment]
    return metrics


def print_summary(results: dict[str, Any]) -> None:
    """One line per configuration with the headline figures (the columns that have any)."""
    configs = results["configs"]
    columns = [
        (label, path)
        for label, path in SUMMARY
        if any(_value(c["metrics"], path) is not None for c in configs)
    ]
    width = max([len("config"), *(len(c["name"]) for c in configs)])
    out(f"{'config':<{width}}  " + "  ".join(f"{label:>8}" for label, _ in columns))
    for c in configs:
        cells = []
        for label, path in columns:
            value = _value(c["metrics"], path)
            text = (
                "—" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)
            )
            cells.append(f"{text:>{max(8, len(label))}}")
        out(f"{c['name']:<{width}}  " + "  ".join(cells))


def cmd_eval(args: argparse.Namespace) -> int:
    from rag.eval.config import load_configs
    from rag.eval.evaluation import evaluate

    configs = load_configs(args.config or [])
    results = evaluate(
        args.dataset,
        args.out,
        index=args.index,
        configs=configs,
        limit=args.limit,
        seed=args.seed,
        threads=args.threads,
        data_dir=args.data_dir,
        index_dir=args.index_dir,
        restart=args.restart,
        retry_errors=args.retry_errors,
        show_progress=not args.quiet,
        command="ragguard "
        + shlex.join(sys.argv[1:] if getattr(args, "argv", None) is None else args.argv),
        say=note,
    )
    dataset = results["dataset"]
    done = min((c["metrics"]["counts"]["done"] for c in results["configs"]), default=0)
    progress = f" ({done} done)" if results["interrupted"] else ""
    out(
        f"{dataset['name']}: {dataset['num_items']} of {dataset['num_items_total']} items{progress}"
    )
    print_summary(results)
    out(f"\nwrote {args.out / 'results.json'} and {args.out / 'report.html'}")
    if results["interrupted"]:
        note("interrupted: run the same command again to resume")
        return 130
    return 0


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "eval",
        help="measure retrieval, answers, guards and speed on a QA dataset; write a report",
        description=(
            "Ask every question of DATASET (a JSONL file, or a built-in set: "
            f"{', '.join(BUILTIN_NAMES)}) under each configuration, and write "
            "OUT/results.json and OUT/report.html. Each item's record is appended to "
            "OUT/<config>/items.jsonl as it finishes: the same command resumes a run."
        ),
    )
    p.add_argument("dataset", help=f"JSONL file, or one of {', '.join(BUILTIN_NAMES)}")
    p.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="folder for the records and report"
    )
    p.add_argument(
        "--index",
        metavar="NAME",
        help="index holding the documents (built-in sets: default its name; built when missing)",
    )
    p.add_argument(
        "--index-dir", type=Path, metavar="DIR", help="folder of indexes (default: ./indexes)"
    )
    p.add_argument(
        "--config",
        type=Path,
        action="append",
        metavar="FILE",
        help="TOML file of settings overrides, named by its stem; repeat to compare several",
    )
    p.add_argument("--limit", type=int, metavar="N", help="only the first N items")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="sampling seed (default 0)")
    p.add_argument(
        "--threads", type=int, default=8, metavar="N", help="questions in flight (default 8)"
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        metavar="DIR",
        help="folder of the public data sets, for built-in sets (default: ../shared/data)",
    )
    p.add_argument("--restart", action="store_true", help="discard earlier records in --out")
    p.add_argument(
        "--retry-errors",
        action="store_true",
        help="ask again the items whose earlier records hold no answer (a deadline missed, an "
        "engine error); the new records are appended and count instead",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_eval)
