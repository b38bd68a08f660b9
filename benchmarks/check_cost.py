"""What checking an answer costs: a bare answer against the same answer checked, side by side.

One question at a time, the configurations alternating per question (so drifts in the machine's
speed hit all of them alike), the same model and index; medians of the end-to-end time. The
engine's prefix cache is on, as in production: the variant that asks a question first pays its
prompt's prefill and the others reuse it, so the order rotates and each variant goes first on a
quarter of the questions (use a multiple of 4).

    bare          guards off, one answer (what a plain RAG pipeline does)
    check         every guard, one answer (the default configuration)
    + verify      the same, and self-verification (P(yes) on the shared prefix)
    + K samples   the same, and the answer plus K-1 extra samples

    python benchmarks/check_cost.py --questions 12 --samples 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from rag.pipeline import Pipeline  # noqa: E402
from rag.settings import Settings  # noqa: E402

QUESTIONS = [
    "What does a KV cache avoid recomputing?",
    "What is continuous batching?",
    "Why does prefill cost more than a decode step?",
    "What is self-consistency voting?",
    "What does paged attention store in blocks?",
    "What is prefix caching?",
    "What does the temperature of sampling change?",
    "How does speculative decoding speed up generation?",
    "What is a repetition penalty?",
    "What does top-p sampling keep?",
    "Why is batch-1 decoding memory-bound?",
    "What does the attention mechanism compute?",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=12, help="a multiple of 4")
    parser.add_argument("--samples", type=int, default=4, help="K of the check n=K variant")
    parser.add_argument("--index", default="demo")
    parser.add_argument("--index-dir", type=Path, default=None, help="default: a fresh demo index")
    args = parser.parse_args()
    index_dir = args.index_dir or Path(tempfile.mkdtemp()) / "indexes"
    base = Settings(index_dir=index_dir, index_name=args.index, data_dir=index_dir.parent / "data")
    loaded = Pipeline.from_settings(base)
    if args.index == "demo" and args.index_dir is None:
        from rag.demo import demo_collection_path
        from rag.retrieval.documents import load_path

        loaded.collections.get("demo", create=True).ingest(load_path(demo_collection_path()))
    variants = {
        "bare": base.updated(**{"guards_enabled": False, "num_candidates": 1}),
        "check": base.updated(**{"num_candidates": 1, "self_verification": False}),
        "+ verify": base.updated(**{"num_candidates": 1, "self_verification": True}),
        f"+ {args.samples} samples": base.updated(
            **{"num_candidates": args.samples, "self_verification": False}
        ),
    }
    pipelines = {name: Pipeline(s, loaded.embedder, loaded.engine) for name, s in variants.items()}
    totals: dict[str, list[float]] = {name: [] for name in variants}
    verify: list[float] = []
    guards: dict[str, list[float]] = {name: [] for name in variants}
    questions = (QUESTIONS * (args.questions // len(QUESTIONS) + 1))[: args.questions]
    for k, question in enumerate(questions):
        order = list(pipelines.items())
        order = order[k % len(order) :] + order[: k % len(order)]
        for name, pipe in order:
            result = pipe.ask(question, seed=k)
            totals[name].append(result.timings["total_s"])
            guards[name].append(result.timings.get("guards_s", 0.0))
            if "verify_s" in result.timings:
                verify.append(result.timings["verify_s"])
    bare = statistics.median(totals["bare"])
    print(f"{len(questions)} questions, index {args.index}, one at a time, medians\n")
    print("| variant | end to end | guards | vs bare |")
    print("| --- | --- | --- | --- |")
    figures: dict[str, float] = {}
    for name, times in totals.items():
        median = statistics.median(times)
        figures[name] = median / bare
        print(
            f"| {name} | {median:.2f} s | {statistics.median(guards[name]):.2f} s "
            f"| {median / bare:.2f}× |"
        )
    if verify:
        share = statistics.median(verify) / bare
        figures["self_verification_vs_bare"] = share
        print(
            f"\nself-verification: {statistics.median(verify):.3f} s = {share:.2f}× a bare answer"
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
