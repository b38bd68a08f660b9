"""Guards measured on labelled data, each against baselines computed in the same run.

    python benchmarks/guards_eval.py --data-dir DIR [--limit N] [--sections a,b,...]

Sections (all by default; the data and the scoring live in ``benchmarks.research``):

- ``halueval`` (``benchmarks.research.halueval_pairs``): HaluEval QA's right and hallucinated
  answers checked against the item's knowledge; AUROC and F1 of the flag "hallucinated" for the
  prior, shipped and 2-fold cross-fitted confidence against answer length, lexical overlap and
  mean token logprob.
- ``metaqa_claims`` (``benchmarks.research.metaqa_guard``): gold MetaQA triples written as noisy
  sentences, corrupted ones and paraphrases (``benchmarks.research.guard_sets``) through the
  knowledge-graph guard.
- ``metaqa_answers`` (``benchmarks.research.metaqa_guard``): the default model answers MetaQA
  1-hop questions from the graph rendered as passages; AUROC of the guard for answer correctness.
- ``end_to_end`` (``benchmarks.research.end_to_end``): MuSiQue, HotpotQA and PubMedQA through
  ``Pipeline.ask`` with ``--num-candidates`` samples per question; AUROC and risk-coverage of the
  confidence (prior, cross-fitted) against the mean token logprob. ``--save-confidence PATH``
  writes the model fitted on every answer.
- ``repetition`` (``benchmarks.research.repetition_loops``): prompts that make the default model
  loop with penalties off; recall of the repetition guard and of the engine's loop stop check.

Each section prints one JSON line as it ends; the last line of stdout is one JSON object with
every figure and the command.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.research.end_to_end import fit_confidence, generate_end_to_end, score_end_to_end  # noqa: E402
from benchmarks.research.guard_sets import SEED, load_movie_graph  # noqa: E402
from benchmarks.research.halueval_pairs import run_halueval  # noqa: E402
from benchmarks.research.metaqa_guard import run_metaqa_answers, run_metaqa_claims  # noqa: E402
from benchmarks.research.repetition_loops import run_repetition  # noqa: E402
from engine import EngineConfig, HFGenerator, LLMEngine  # noqa: E402
from rag.demo import ensure_demo_index  # noqa: E402
from rag.pipeline import Pipeline  # noqa: E402
from rag.retrieval.embed import Embedder  # noqa: E402
from rag.settings import Settings  # noqa: E402

SECTIONS = ("halueval", "metaqa_claims", "metaqa_answers", "end_to_end", "repetition")
DEFAULT_DATA_DIR = ROOT.parent / "shared" / "data"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--limit", type=int, default=100, help="items per data set")
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--num-candidates", type=int, default=5, help="samples per question")
    parser.add_argument("--threads", type=int, default=8, help="questions asked at once")
    parser.add_argument("--save-confidence", type=Path, default=None)
    parser.add_argument("--dump", type=Path, default=None, help="write end-to-end answers here")
    parser.add_argument(
        "--from-dump", type=Path, default=None, help="re-score these end-to-end answers"
    )
    args = parser.parse_args(argv)
    unknown = set(args.sections.split(",")) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    return args


def rounded(value: Any) -> Any:
    """Floats to 4 decimals, however deep in the record."""
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


class Models:
    """The embedder and the generator, each loaded once, when a section first needs it."""

    def __init__(self, config: EngineConfig):
        self.config = config

    @cached_property
    def embedder(self) -> Embedder:
        return Embedder()

    @cached_property
    def generator(self) -> LLMEngine:
        return LLMEngine(self.config)


def end_to_end(args: argparse.Namespace, models: Models) -> dict[str, Any]:
    """Generate (or read ``--from-dump``), dump if asked, score, save the fitted model if asked."""
    if args.from_dump:
        records = [json.loads(line) for line in args.from_dump.read_text().splitlines()]
    else:
        records = generate_end_to_end(
            args.data_dir,
            args.limit,
            models.embedder,
            models.generator,
            num_candidates=args.num_candidates,
            threads=args.threads,
        )
        if args.dump:
            args.dump.write_text("".join(json.dumps(r) + "\n" for r in records))
    record, checked = score_end_to_end(records, models.embedder, args.num_candidates)
    if args.save_confidence:
        model = fit_confidence(checked, record, args.num_candidates)
        if model is not None:
            model.save(args.save_confidence)
            record["saved_confidence_model"] = str(args.save_confidence)
            record["fitted_weights"] = model.weights
    return record


def repetition(models: Models) -> dict[str, Any]:
    """The loop prompts, and the demo questions over the demo collection."""
    with tempfile.TemporaryDirectory(prefix="ragguard-eval-") as tmp:
        settings = Settings(index_dir=Path(tmp) / "indexes", data_dir=Path(tmp) / "data")
        demo = Pipeline(settings, models.embedder, models.generator)
        ensure_demo_index(demo.collections)
        record = run_repetition(models.generator, demo)
        demo.close()
    return record


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    sections = args.sections.split(",")
    torch.manual_seed(SEED)
    config = EngineConfig()
    models = Models(config)
    record: dict[str, Any] = {
        "benchmark": "guards_eval",
        "command": "python benchmarks/guards_eval.py " + shlex.join(sys.argv[1:]),
        "limit": args.limit,
    }

    def report(section: str, figures: dict[str, Any]) -> None:
        record[section] = figures
        print(json.dumps({section: rounded(figures)}), flush=True)

    if "halueval" in sections:
        hf = HFGenerator(config)
        report("halueval", run_halueval(args.data_dir, args.limit, models.embedder, hf))
        del hf
    if "metaqa_claims" in sections or "metaqa_answers" in sections:
        graph, load_s = load_movie_graph(args.data_dir)
        record["metaqa_graph"] = {"triples": len(graph), "load_s": load_s}
        if "metaqa_claims" in sections:
            report("metaqa_claims", run_metaqa_claims(args.data_dir, args.limit, graph))
        if "metaqa_answers" in sections:
            figures = run_metaqa_answers(
                args.data_dir,
                args.limit,
                graph,
                models.embedder,
                models.generator,
                threads=args.threads,
            )
            report("metaqa_answers", figures)
        del graph
    if "end_to_end" in sections:
        report("end_to_end", end_to_end(args, models))
    if "repetition" in sections:
        record["repetition"] = repetition(models)
    print(json.dumps(rounded(record)))


if __name__ == "__main__":
    main()
