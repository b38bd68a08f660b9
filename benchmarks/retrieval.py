"""Retrieval: search latency on synthetic indexes, and recall on real multi-hop QA corpora.

Latency: a ``VectorIndex`` (flat, then HNSW) holding N random unit vectors, written in batches
of 10,000 rows like ingestion does; single-query ``search(vec, 10)`` timings, p50 and p99. Random
vectors are the worst case for HNSW, so its agreement with exact search is shown but is not a
recall figure. Recall: the MuSiQue and HotpotQA subsets, one document per passage, ingested with
``Collection.ingest``; for every question the top 10 chunks of ``Collection.search`` in each
retrieval mode (dense, BM25, hybrid: both fused by reciprocal rank), scored by the gold passage
titles they cover. On the flat synthetic indexes the latency part also times the first BM25
search after the writes (building the BM25 index from the stored texts and saving it) and the
BM25 and hybrid queries after it.

    python benchmarks/retrieval.py --sizes 10000,100000 --num-queries 200

The recall table's query latency is ``Collection.search`` as a whole (query embedding plus
search); ``--faiss-omp-threads 1`` shows what FAISS's and torch's OpenMP pools cost each other.

The last line of stdout is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rag.eval import datasets as eval_datasets
from rag.eval.datasets import QADataset
from rag.retrieval.collection import Collection, CollectionRegistry
from rag.retrieval.documents import Chunk, Document
from rag.retrieval.embed import Embedder
from rag.retrieval.index import VectorIndex
from rag.types import RETRIEVAL_MODES, RetrievalMode

SEED = 0
DIMENSION = 384
TOP_K = 10
RECALL_KS = (5, 10)
ROWS_PER_WRITE = 10_000
CHUNKS_PER_DOC = 100
WORDS_PER_TEXT = 8
INDEX_TYPES = ("flat", "hnsw")
SUBSETS = Path("hipporag_multihop_subsets")
DEFAULT_DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"
VOCABULARY = (
    "alpha beta gamma delta river stone market harbor engine signal winter orange copper "
    "garden ledger violin planet canyon meadow lantern thunder ribbon castle pepper mirror "
    "falcon glacier velvet anchor compass"
).split()


@dataclass(frozen=True, slots=True)
class Question:
    """A question and the titles of the passages that support its answer."""

    text: str
    gold_titles: frozenset[str]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--sizes", default="10000,100000", help="index sizes, comma-separated")
    parser.add_argument("--num-queries", type=int, default=200, help="latency queries per index")
    parser.add_argument("--index-types", default="flat,hnsw", help="comma-separated")
    parser.add_argument(
        "--modes", default=",".join(RETRIEVAL_MODES), help="retrieval modes for the recall table"
    )
    parser.add_argument("--limit-questions", type=int, default=None, help="per dataset")
    parser.add_argument(
        "--max-passages",
        type=int,
        default=None,
        help="per dataset: gold passages of the kept questions, then others up to this many",
    )
    parser.add_argument(
        "--faiss-omp-threads",
        type=int,
        default=None,
        help="set FAISS's OpenMP threads (default: leave as ragguard does)",
    )
    parser.add_argument(
        "--torch-threads", type=int, default=None, help="torch intra-op threads (default: cores)"
    )
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-recall", action="store_true")
    args = parser.parse_args(argv)
    try:
        args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes must be comma-separated integers, got {args.sizes!r}")
    args.index_types = [t.strip() for t in args.index_types.split(",") if t.strip()]
    if not set(args.index_types) <= set(INDEX_TYPES) or not args.index_types:
        parser.error(f"--index-types must be a subset of {','.join(INDEX_TYPES)}")
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not set(args.modes) <= set(RETRIEVAL_MODES) or not args.modes:
        parser.error(f"--modes must be a subset of {','.join(RETRIEVAL_MODES)}")
    if min(args.sizes, default=0) < TOP_K or args.num_queries < 1:
        parser.error(f"--sizes must each be at least {TOP_K}; --num-queries at least 1")
    return args


# ----------------------------------------------------------------------------------- latency
def random_unit_vectors(rng: np.random.Generator, num: int) -> np.ndarray:
    """``num`` random float32 vectors of unit length."""
    vectors = rng.standard_normal((num, DIMENSION), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def random_texts(rng: np.random.Generator, num: int) -> list[str]:
    """Short nonsense texts, so that the chunk rows have realistic-ish sizes."""
    picks = rng.integers(0, len(VOCABULARY), size=(num, WORDS_PER_TEXT))
    return [" ".join(VOCABULARY[i] for i in row) for row in picks]


def synthetic_upserts(
    rng: np.random.Generator, first_row: int, num_rows: int
) -> list[tuple[Document, list[Chunk], np.ndarray]]:
    """Rows ``first_row`` onwards as documents of ``CHUNKS_PER_DOC`` chunks each."""
    vectors, texts = random_unit_vectors(rng, num_rows), random_texts(rng, num_rows)
    upserts = []
    for start in range(0, num_rows, CHUNKS_PER_DOC):
        doc_id = f"doc-{(first_row + start) // CHUNKS_PER_DOC:07d}"
        end = min(start + CHUNKS_PER_DOC, num_rows)
        chunks = [Chunk(f"{doc_id}#{j}", doc_id, j, texts[start + j]) for j in range(end - start)]
        doc = Document(doc_id, " ".join(texts[start:end]), {"title": doc_id})
        upserts.append((doc, chunks, vectors[start:end]))
    return upserts


def build_random_index(path: Path, index_type: str, num_rows: int) -> tuple[VectorIndex, float]:
    """An index of ``num_rows`` random rows, and the seconds its writes took."""
    rng = np.random.default_rng(SEED)
    index = VectorIndex.create(
        path, embedding_model="random-unit-vectors", dimension=DIMENSION, index_type=index_type
    )
    build_s = 0.0
    for first_row in range(0, num_rows, ROWS_PER_WRITE):
        upserts = synthetic_upserts(rng, first_row, min(ROWS_PER_WRITE, num_rows - first_row))
        started = time.perf_counter()
        index.write(upserts)
        build_s += time.perf_counter() - started
    return index, build_s


def time_searches(index: VectorIndex, queries: np.ndarray) -> tuple[list[float], list[list[str]]]:
    """Milliseconds per single-query search, and the chunk ids each one returned."""
    for query in queries[:5]:  # warm-up: first-touch page faults and lazy allocations
        index.search(query, TOP_K)
    latencies_ms, hit_ids = [], []
    for query in queries:
        started = time.perf_counter()
        hits = index.search(query, TOP_K)
        latencies_ms.append((time.perf_counter() - started) * 1000)
        hit_ids.append([h.chunk.chunk_id for h in hits])
    return latencies_ms, hit_ids


def time_lexical(index: VectorIndex, queries: np.ndarray) -> dict[str, float]:
    """Seconds of the first BM25 search (it builds and saves the BM25 index), then the p50 of
    BM25 and of hybrid single queries (three words of the texts' vocabulary each)."""
    texts = random_texts(np.random.default_rng(SEED + 2), len(queries))
    texts = [" ".join(t.split()[:3]) for t in texts]
    started = time.perf_counter()
    index.search(queries[0], TOP_K, text=texts[0], mode="bm25")
    record = {"bm25_build_s": time.perf_counter() - started}
    modes: tuple[RetrievalMode, ...] = ("bm25", "hybrid")
    for mode in modes:
        latencies_ms = []
        for query, text in zip(queries, texts, strict=True):
            started = time.perf_counter()
            index.search(query, TOP_K, text=text, mode=mode)
            latencies_ms.append((time.perf_counter() - started) * 1000)
        record[f"{mode}_p50_ms"] = float(np.percentile(latencies_ms, 50))
    return record


def overlap(found: list[list[str]], exact: list[list[str]]) -> float:
    """Mean share of the exact top-k that ``found`` also returned."""
    shares = [len(set(f) & set(e)) / len(e) for f, e in zip(found, exact, strict=True)]
    return float(np.mean(shares))


def run_latency(sizes: list[int], index_types: list[str], num_queries: int) -> list[dict[str, Any]]:
    """One record per (size, index type)."""
    queries = random_unit_vectors(np.random.default_rng(SEED + 1), num_queries)
    records = []
    for size in sizes:
        exact: list[list[str]] | None = None
        for index_type in index_types:
            with tempfile.TemporaryDirectory(prefix="ragguard-bench-") as tmp:
                index, build_s = build_random_index(Path(tmp) / "bench", index_type, size)
                latencies_ms, hit_ids = time_searches(index, queries)
                lexical = time_lexical(index, queries) if index_type == "flat" else {}
                index.close()
            record = {
                "size": size,
                "index_type": index_type,
                "build_s": build_s,
                "p50_ms": float(np.percentile(latencies_ms, 50)),
                "p99_ms": float(np.percentile(latencies_ms, 99)),
                "mean_ms": float(np.mean(latencies_ms)),
                "agreement_with_flat": None,
                **lexical,
            }
            if index_type == "flat":
                exact = hit_ids
            elif exact is not None:
                record["agreement_with_flat"] = overlap(hit_ids, exact)
            records.append(record)
            print(f"  latency: {size} rows, {index_type}: done", file=sys.stderr)
    return records


# ------------------------------------------------------------------------------------ recall
def _questions(dataset: QADataset) -> tuple[list[Document], list[Question]]:
    return dataset.documents, [Question(e.question, e.gold_titles) for e in dataset.examples]


def load_musique(data_dir: Path) -> tuple[list[Document], list[Question]]:
    """MuSiQue passages and questions (``rag.eval.datasets``)."""
    return _questions(eval_datasets.load_musique(data_dir))


def load_hotpotqa(data_dir: Path) -> tuple[list[Document], list[Question]]:
    """HotpotQA paragraphs and questions (``rag.eval.datasets``)."""
    return _questions(eval_datasets.load_hotpotqa(data_dir))


def shrink(
    docs: list[Document],
    questions: list[Question],
    limit_questions: int | None,
    max_passages: int | None,
) -> tuple[list[Document], list[Question]]:
    """The first questions, and every gold passage plus the first others up to the cap."""
    questions = questions[:limit_questions]
    if max_passages is None:
        return docs, questions
    gold = set().union(*(q.gold_titles for q in questions))
    kept = [d for d in docs if d.metadata["title"] in gold]
    others = [d for d in docs if d.metadata["title"] not in gold]
    return kept + others[: max(0, max_passages - len(kept))], questions


def evaluate(
    collection: Collection, questions: list[Question], mode: RetrievalMode = "dense"
) -> dict[str, Any]:
    """Recall@k (share of gold titles in the top k), all-gold@k and query latency."""
    found: dict[int, list[float]] = {k: [] for k in RECALL_KS}
    complete: dict[int, list[bool]] = {k: [] for k in RECALL_KS}
    latencies_ms = []
    for question in questions:
        started = time.perf_counter()
        hits = collection.search(question.text, max(RECALL_KS), mode=mode)
        latencies_ms.append((time.perf_counter() - started) * 1000)
        titles = [hit.metadata["title"] for hit in hits]
        for k in RECALL_KS:
            covered = question.gold_titles & set(titles[:k])
            found[k].append(len(covered) / len(question.gold_titles))
            complete[k].append(covered == question.gold_titles)
    record: dict[str, Any] = {"num_questions": len(questions)}
    for k in RECALL_KS:
        record[f"recall@{k}"] = float(np.mean(found[k]))
        record[f"all_gold@{k}"] = float(np.mean(complete[k]))
    record["query_p50_ms"] = float(np.percentile(latencies_ms, 50))
    return record


def load_datasets(args: argparse.Namespace) -> dict[str, tuple[list[Document], list[Question]]]:
    """Each dataset's passages and questions, cut down as the options ask."""
    loaders: dict[str, Callable[[Path], tuple[list[Document], list[Question]]]] = {
        "musique": load_musique,
        "hotpotqa": load_hotpotqa,
    }
    return {
        name: shrink(*load(args.data_dir), args.limit_questions, args.max_passages)
        for name, load in loaders.items()
    }


def run_recall(
    datasets: dict[str, tuple[list[Document], list[Question]]],
    index_types: list[str],
    embedder: Embedder,
    modes: list[RetrievalMode],
) -> list[dict[str, Any]]:
    """One record per (dataset, index type, retrieval mode)."""
    records = []
    for dataset, (docs, questions) in datasets.items():
        for index_type in index_types:
            with tempfile.TemporaryDirectory(prefix="ragguard-bench-") as tmp:
                registry = CollectionRegistry(Path(tmp), embedder, index_type=index_type)
                collection = registry.get(dataset, create=True)
                report = collection.ingest(docs)
                for mode in modes:
                    collection.search(questions[0].text, 1, mode=mode)  # builds BM25 once
                    records.append(
                        {
                            "dataset": dataset,
                            "index_type": index_type,
                            "mode": mode,
                            "num_passages": len(docs),
                            "num_chunks": report.num_chunks,
                            "ingest_s": report.elapsed_s,
                            **evaluate(collection, questions, mode),
                        }
                    )
                registry.close()
            print(f"  recall: {dataset}, {index_type}: done", file=sys.stderr)
    return records


# ------------------------------------------------------------------------------------ output
def format_table(headers: list[str], rows: list[list[str]]) -> str:
    """A plain, aligned text table."""
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows, strict=True)]
    lines = [headers, ["-" * w for w in widths], *rows]
    return "\n".join(
        "  ".join(str(c).rjust(w) for c, w in zip(line, widths, strict=True)) for line in lines
    )


def print_latency(records: list[dict[str, Any]], num_queries: int) -> None:
    """The latency table."""
    print(f"\nSearch latency, {num_queries} single queries, top {TOP_K}, dim {DIMENSION}\n")
    rows = [
        [
            f"{r['size']:,}",
            r["index_type"],
            f"{r['build_s']:.1f}",
            f"{r['p50_ms']:.2f}",
            f"{r['p99_ms']:.2f}",
            "-" if r["agreement_with_flat"] is None else f"{r['agreement_with_flat']:.3f}",
            *(
                f"{r[key]:.2f}" if key in r else "-"
                for key in ("bm25_build_s", "bm25_p50_ms", "hybrid_p50_ms")
            ),
        ]
        for r in records
    ]
    headers = [
        "rows",
        "index",
        "build s",
        "p50 ms",
        "p99 ms",
        "top-10 agreement w/ flat",
        "BM25 build s",
        "BM25 p50 ms",
        "hybrid p50 ms",
    ]
    print(format_table(headers, rows))


def print_recall(records: list[dict[str, Any]]) -> None:
    """The recall table."""
    print("\nRecall on real corpora (gold matched by passage title)\n")
    rows = [
        [
            r["dataset"],
            r["index_type"],
            r["mode"],
            str(r["num_passages"]),
            str(r["num_questions"]),
            *(f"{r[f'{m}@{k}']:.3f}" for m in ("recall", "all_gold") for k in RECALL_KS),
            f"{r['ingest_s']:.1f}",
            f"{r['query_p50_ms']:.1f}",
        ]
        for r in records
    ]
    metrics = [f"{m}@{k}" for m in ("recall", "all_gold") for k in RECALL_KS]
    headers = [
        "dataset",
        "index",
        "mode",
        "passages",
        "questions",
        *metrics,
        "ingest s",
        "query p50 ms",
    ]
    print(format_table(headers, rows))


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print the tables, the command line and the JSON figures."""
    args = parse_args(argv)
    load_1m = os.getloadavg()[0]
    if args.faiss_omp_threads is not None:
        import faiss

        faiss.omp_set_num_threads(args.faiss_omp_threads)
    if args.torch_threads is not None:
        import torch

        torch.set_num_threads(args.torch_threads)
    try:
        datasets = {} if args.skip_recall else load_datasets(args)  # a missing file fails early
    except eval_datasets.DatasetNotFoundError as exc:
        sys.exit(f"error: {exc}. Pass --data-dir DIR, where DIR holds {SUBSETS}/.")
    latency = (
        [] if args.skip_latency else run_latency(args.sizes, args.index_types, args.num_queries)
    )
    recall = (
        [] if args.skip_recall else run_recall(datasets, args.index_types, Embedder(), args.modes)
    )
    if latency:
        print_latency(latency, args.num_queries)
    if recall:
        print_recall(recall)
    command = f"python {shlex.join(sys.argv)}"
    print(f"\nreproduce: {command}")
    record = {
        "benchmark": "retrieval",
        "seed": SEED,
        "top_k": TOP_K,
        "num_queries": args.num_queries,
        "faiss_omp_threads": args.faiss_omp_threads,
        "torch_threads": args.torch_threads,
        "latency": latency,
        "recall": recall,
        "cpu_count": os.cpu_count(),
        "loadavg_1m_at_start": load_1m,
        "loadavg_1m_at_end": os.getloadavg()[0],
        "command": command,
    }
    print(json.dumps(record))


if __name__ == "__main__":
    main()
