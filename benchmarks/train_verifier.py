"""Train the verifier (``guards.verifier``) on development data and measure it cross-fitted.

Reads labelled ``ragguard eval`` runs (one folder per data set, as for benchmarks/judgement.py)
and the built-in sets' gold answers from the data folder, builds the examples (recorded answers
labelled by the eval's matching; gold answers and wrong answers of the same kind), caches the
frozen layers' output once, then:

1. cross-fits: for each of ``--folds`` folds of the labelled questions, trains on every example
   whose question is not in that fold, and scores that fold's recorded answers (each question's
   answers are scored by a verifier that never saw the question); prints the AUROC per set and
   writes the fold models, which benchmarks/judgement.py uses (``--verifier-folds``);
2. with ``--write FILE``, trains on everything and writes ``FILE`` (``.safetensors``, with its
   ``.json`` description beside it), for ``RAGGUARD_VERIFIER=FILE``.

    python benchmarks/train_verifier.py --runs eval-runs/labelled --out eval-runs/verifier
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from guards.verifier import verifier_inputs  # noqa: E402
from rag.eval.items import EvalItem  # noqa: E402
from rag.eval.metrics import auroc  # noqa: E402
from rag.eval.training import LabelledAnswer, load_run  # noqa: E402
from rag.eval.verifier_examples import (  # noqa: E402
    VerifierExample,
    fold_of,
    generated_examples,
    gold_examples,
    read_examples,
    write_examples,
)
from rag.eval.verifier_training import (  # noqa: E402
    FrozenCache,
    TrainConfig,
    cached_scores,
    load_base,
    save_verifier,
    train_verifier,
)

DEFAULT_DATA_DIR = ROOT.parent / "shared" / "data"
GOLD_LIMITS: dict[str, int] = {
    "metaqa": 1200,
    "pubmedqa": 500,
    "hotpotqa": 50,
    "musique": 100,
    "rgb": 50,
}
"""Questions per set that give gold examples (the first of each set, as ``ragguard eval``
orders them; MetaQA's pool is far larger than needed)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, required=True, help="folder of <set>/ eval outputs")
    parser.add_argument("--out", type=Path, required=True, help="folder for examples and folds")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--folds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--tune-layers", type=int, default=2)
    parser.add_argument("--write", type=Path, help="train on all, write this .safetensors file")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the examples file")
    return parser.parse_args(argv)


def build_examples(answers: list[LabelledAnswer], data_dir: Path) -> list[VerifierExample]:
    from rag.eval.prepare import prepare
    from rag.retrieval.collection import CollectionRegistry
    from rag.retrieval.embed import Embedder
    from rag.settings import Settings
    from rag.stages import RetrieveStage

    settings = Settings()
    embedder = Embedder(settings.embedding_model)
    retrieve = RetrieveStage(CollectionRegistry.from_settings(settings, embedder))
    examples = generated_examples(answers)
    for name, limit in GOLD_LIMITS.items():
        items = prepare(name, data_dir).items[:limit]

        def passages_of(item: EvalItem, name: str = name) -> list[str]:
            r = retrieve.run(item.question, name, settings.top_k, settings.min_score)
            return [p.text for p in r.passages]

        made = gold_examples(name, items, passages_of)
        print(f"{name}: {len(made)} gold examples", flush=True)
        examples += made
    return examples


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch

    from rag.retrieval.embed import default_embedding_path, model_fingerprint

    torch.manual_seed(0)
    answers: list[LabelledAnswer] = []
    for run_dir in sorted(p for p in args.runs.iterdir() if (p / "dataset.jsonl").is_file()):
        answers += load_run(run_dir)
    labelled = {(a.dataset, a.item.id) for a in answers}
    examples_path = args.out / "examples.jsonl"
    if args.rebuild or not examples_path.is_file():
        write_examples(build_examples(answers, args.data_dir), examples_path)
    examples = read_examples(examples_path)
    counts: dict[str, list[int]] = {}
    for e in examples:
        c = counts.setdefault(f"{e.dataset}/{e.source}", [0, 0])
        c[e.label] += 1
    print("examples (wrong, right):", json.dumps(counts))

    base = default_embedding_path()
    config = TrainConfig(tune_layers=args.tune_layers, epochs=args.epochs)
    frozen = 6 - config.tune_layers
    t0 = time.perf_counter()
    probe = load_base(base, config.max_length)
    cache = FrozenCache(probe, examples, frozen, args.out / f"cache-layer{frozen}.pt")
    took = time.perf_counter() - t0
    print(f"cached {len(examples)} examples' layer-{frozen} states in {took:.0f} s")

    def fold(e: VerifierExample) -> int | None:
        if (e.dataset, e.group) not in labelled:
            return None  # not a question of the runs: trains every fold
        return fold_of(e.dataset, e.group, args.folds)

    folds = [fold(e) for e in examples]
    report: dict[str, dict[str, float]] = {}
    scored: dict[str, list[tuple[float, int]]] = {}
    for k in range(args.folds):
        train = [i for i, f in enumerate(folds) if f != k]
        t0 = time.perf_counter()
        verifier = train_verifier(base, cache, train, config)
        print(f"fold {k}: trained on {len(train)} in {time.perf_counter() - t0:.0f} s")
        save_verifier(verifier, args.out / f"fold{k}.safetensors", config, {"fold": k})
        if k == 0:  # the cached path trains what the full forward pass scores
            some = list(range(min(8, len(examples))))
            pairs = [verifier_inputs(e.question, e.answer, e.passages) for e in examples[:8]]
            gap = np.abs(
                np.array(cached_scores(verifier, cache, some, config.tune_layers))
                - np.array(verifier.score_pairs(pairs))
            ).max()
            assert gap < 5e-3, f"cached and full forward passes disagree by {gap}"
        for a in answers:
            if fold_of(a.dataset, a.item.id, args.folds) != k:
                continue
            p = verifier.score(a.item.question, a.answer, [p["text"] for p in a.record["passages"]])
            scored.setdefault(a.dataset, []).append((p, a.correct))
        test = [i for i, f in enumerate(folds) if f == k and examples[i].source == "gold"]
        gold_scores = cached_scores(verifier, cache, test, config.tune_layers)
        report.setdefault("gold", {})[f"fold{k}"] = auroc(
            gold_scores, [examples[i].label for i in test]
        )
    print("\ncross-fitted verifier AUROC on the recorded answers (each scored by a fold that")
    print("never saw its question):\n")
    print("| set | answers | right | AUROC |\n| --- | --- | --- | --- |")
    for name, pairs in sorted(scored.items()):
        value = auroc([p for p, _ in pairs], [c for _, c in pairs])
        report.setdefault("answers", {})[name] = value
        print(f"| {name} | {len(pairs)} | {sum(c for _, c in pairs)} | {value:.3f} |")
    print(f"\nheld-out gold examples AUROC per fold: {report['gold']}")
    (args.out / "crossfit.json").write_text(json.dumps(report, indent=2) + "\n")

    if args.write:
        t0 = time.perf_counter()
        verifier = train_verifier(base, cache, list(range(len(examples))), config)
        about = {
            "base_model": "all-MiniLM-L6-v2",
            "base_fingerprint": model_fingerprint(base),
            "trained_on": {k: sum(v) for k, v in counts.items()},
            "crossfit_auroc": report.get("answers", {}),
        }
        save_verifier(verifier, args.write, config, about)
        took = time.perf_counter() - t0
        print(f"wrote {args.write} ({args.write.stat().st_size / 1e6:.1f} MB) in {took:.0f} s")
        check = verifier.score(
            "Who wrote Hamlet?",
            "Shakespeare",
            ["Hamlet is a tragedy written by William Shakespeare."],
        )
        print(f"check: P(right) {check:.3f} for Shakespeare as the author of Hamlet")


if __name__ == "__main__":
    main()
