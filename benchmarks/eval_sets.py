"""``ragguard eval`` on the built-in sets with one configuration: the figures of docs/benchmarks.md.

    python benchmarks/eval_sets.py --limit 100 --out eval-runs

Each set runs as ``ragguard eval SET --limit N --out OUT/SET`` would (same records, same report,
resumable), with the models loaded once for all of them. Prints a table of answer and guard
figures, a table of speed figures, and the command; the last line of stdout is one JSON object
with every set's headline figures.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rag.eval.config import load_configs
from rag.eval.evaluation import evaluate
from rag.pipeline import Pipeline

SETS = ("musique", "hotpotqa", "pubmedqa", "metaqa")
DEFAULT_DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"
QUALITY = (
    ("accuracy", "answers", "accuracy"),
    ("EM", "answers", "exact_match"),
    ("F1", "answers", "token_f1"),
    ("contains", "answers", "contains_gold"),
    ("R@1", "retrieval", "recall@1"),
    ("R@5", "retrieval", "recall@5"),
    ("MRR@10", "retrieval", "mrr@10"),
    ("answered", "decisions", "answer_rate"),
    ("review", "decisions", "review_rate"),
    ("abstain", "decisions", "abstain_rate"),
    ("declined", "decisions", "declined_rate"),
    ("acc. answered", "decisions", "accuracy_answered"),
    ("acc. flagged", "decisions", "accuracy_flagged"),
    ("AUROC", "confidence", "auroc"),
    ("AURC", "confidence", "aurc"),
    ("ECE", "confidence", "ece"),
)
SPEED = (
    ("TTFT p50 s", "latency", "time_to_first_token_s", "p50"),
    ("TTFT p90 s", "latency", "time_to_first_token_s", "p90"),
    ("e2e p50 s", "latency", "total_s", "p50"),
    ("e2e p90 s", "latency", "total_s", "p90"),
    ("e2e p99 s", "latency", "total_s", "p99"),
    ("tok/s per request p50", "latency", "tokens_per_s", "p50"),
    ("throughput tok/s", "latency", "throughput_tokens_per_s"),
    ("run s", "latency", "elapsed_s"),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--out", type=Path, default=Path("eval-runs"))
    parser.add_argument("--limit", type=int, default=100, help="questions per set")
    parser.add_argument("--sets", default=",".join(SETS), help="comma-separated built-in sets")
    parser.add_argument("--config", type=Path, action="append", help="TOML configuration")
    parser.add_argument("--threads", type=int, default=8, help="questions in flight")
    return parser.parse_args(argv)


def value(metrics: dict[str, Any], *path: str) -> Any:
    for key in path:
        metrics = metrics.get(key) if isinstance(metrics, dict) else None  # type: ignore[assignment]
    return metrics


def fmt(v: Any) -> str:
    if v is None:
        return "—"
    return f"{v:.3f}" if isinstance(v, float) and abs(v) < 10 else f"{v:.1f}"


def table(rows: dict[str, dict[str, Any]], columns: tuple[tuple[str, ...], ...]) -> str:
    head = "| set | questions | " + " | ".join(c[0] for c in columns) + " |"
    lines = [head, "|" + " --- |" * (len(columns) + 2)]
    for name, m in rows.items():
        cells = " | ".join(fmt(value(m, *c[1:])) for c in columns)
        lines.append(f"| {name} | {m['counts']['done']} | {cells} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    configs = load_configs(args.config or [])
    with tempfile.TemporaryDirectory() as state:  # the pipeline's review store: thrown away
        settings = configs[0].settings({"build_demo_index": False, "data_dir": state})
        pipeline = Pipeline.from_settings(settings)  # the models, loaded once for every set
        pipeline.close()
    figures: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    for name in args.sets.split(","):
        results = evaluate(
            name,
            args.out / name,
            configs=configs,
            limit=args.limit,
            threads=args.threads,
            data_dir=args.data_dir,
            embedder=pipeline.embedder,
            generator=pipeline.engine,
            command=f"ragguard eval {name} --limit {args.limit} --out {args.out / name}",
            say=lambda line: print(line, file=sys.stderr),
        )
        figures[name] = results["configs"][0]["metrics"]
        print(f"{name}: done in {time.perf_counter() - started:.0f}s", file=sys.stderr, flush=True)
    print("\nAnswers and guards\n")
    print(table(figures, QUALITY))
    print("\nSpeed (under the run's concurrency)\n")
    print(table(figures, SPEED))
    command = "python benchmarks/eval_sets.py " + shlex.join(sys.argv[1:])
    print(f"\n{command}")
    headline = {
        name: {c[0]: value(m, *c[1:]) for c in (*QUALITY, *SPEED)} for name, m in figures.items()
    }
    print(json.dumps({"benchmark": "eval_sets", "command": command, "sets": headline}))


if __name__ == "__main__":
    main()
