"""Ingestion throughput: ``Collection.ingest`` against a bare ``SentenceTransformer.encode``.

Both sides see exactly the same chunk texts (real MuSiQue passages, chunked beforehand with the
collection's own chunker). Ours additionally chunks, writes SQLite rows and updates and persists
FAISS; the overhead is what that costs on top of embedding. The two are run alternately, in
swapped order on every repeat, so that drifting machine load hits both alike.

    python benchmarks/ingest.py --num-docs 1000 --repeats 3

The last line of stdout is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from rag.collection import CollectionRegistry
from rag.documents import Chunker, Document
from rag.embed import Embedder

SEED = 0
BASELINE_BATCH_SIZE = 64
TARGET_OVERHEAD = 0.15
CORPUS_FILE = Path("hipporag_multihop_subsets") / "musique_train_corpus.json"
DEFAULT_DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@dataclass(frozen=True, slots=True)
class OursRun:
    """One timed ``Collection.ingest`` into a fresh index, with where its time went."""

    total_s: float
    chunk_s: float
    embed_s: float
    write_s: float
    num_chunks: int

    @property
    def other_s(self) -> float:
        """Index creation, per-document lookups, grouping and bookkeeping."""
        return self.total_s - self.chunk_s - self.embed_s - self.write_s


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--num-docs", type=int, default=1000, help="MuSiQue passages to ingest")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--index-type", choices=("flat", "hnsw"), default="flat")
    parser.add_argument(
        "--torch-threads", type=int, default=None, help="torch intra-op threads (default: cores)"
    )
    args = parser.parse_args(argv)
    if args.num_docs < 1 or args.repeats < 1:
        parser.error("--num-docs and --repeats must be at least 1")
    return args


def load_documents(data_dir: Path, num_docs: int) -> list[Document]:
    """The first ``num_docs`` MuSiQue passages; titles repeat, so ids carry the position."""
    path = data_dir / CORPUS_FILE
    if not path.is_file():
        sys.exit(
            f"error: {path} not found. Pass --data-dir DIR, where DIR holds {CORPUS_FILE} "
            "(the HippoRAG multi-hop subsets)."
        )
    passages = json.loads(path.read_text(encoding="utf-8"))[:num_docs]
    return [
        Document(f"{p['title']} [{i}]", p["text"], {"title": p["title"]})
        for i, p in enumerate(passages)
    ]


@contextmanager
def timed_method(obj: Any, name: str, totals: dict[str, float]) -> Iterator[None]:
    """Accumulate the wall time of ``obj.name`` calls in ``totals[name]`` (instance-level patch)."""
    original: Callable[..., Any] = getattr(obj, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            totals[name] = totals.get(name, 0.0) + time.perf_counter() - started

    setattr(obj, name, wrapper)
    try:
        yield
    finally:
        delattr(obj, name)  # the class attribute shows through again


def run_ours(embedder: Embedder, docs: list[Document], index_type: str) -> OursRun:
    """Ingest ``docs`` into a fresh collection in a temporary folder, timing each stage."""
    with tempfile.TemporaryDirectory(prefix="ragguard-bench-") as tmp:
        registry = CollectionRegistry(Path(tmp), embedder, index_type=index_type)
        totals: dict[str, float] = {}
        with timed_method(embedder, "embed", totals):
            started = time.perf_counter()
            collection = registry.get("bench", create=True)
            with (
                timed_method(collection.chunker, "split", totals),
                timed_method(collection.index, "write", totals),
            ):
                report = collection.ingest(docs)
            total_s = time.perf_counter() - started
        registry.close()
    return OursRun(
        total_s=total_s,
        chunk_s=totals.get("split", 0.0),
        embed_s=totals.get("embed", 0.0),
        write_s=totals.get("write", 0.0),
        num_chunks=report.num_chunks,
    )


def run_baseline(embedder: Embedder, chunk_texts: list[str]) -> float:
    """Seconds for one bare ``encode`` of all chunk texts."""
    started = time.perf_counter()
    embedder.model.encode(
        chunk_texts,
        batch_size=BASELINE_BATCH_SIZE,
        normalize_embeddings=True,
        show_progress_bar=False,
    )
    return time.perf_counter() - started


def chunk_texts_of(embedder: Embedder, docs: list[Document], index_type: str) -> list[str]:
    """The chunk texts ingestion will embed, split with the collection's own settings."""
    registry = CollectionRegistry(Path(tempfile.gettempdir()), embedder, index_type=index_type)
    chunker = Chunker(embedder.tokenize, registry.chunk_size, registry.chunk_overlap)
    return [chunk.text for doc in docs for chunk in chunker.split(doc)]


def padded_tokens(embedder: Embedder, chunk_texts: list[str]) -> dict[str, int]:
    """Tokens the model runs on, padding included, in batches of 64.

    Both sides sort the texts longest-first by characters before batching (sentence-transformers
    inside ``encode``; ``Collection`` per commit group, which is the whole set at this size), so
    both pad alike; ``padded / real`` shows what the padding costs.
    """
    lengths = [min(len(embedder.tokenize(t)) + 2, embedder.max_seq_length) for t in chunk_texts]
    order = sorted(range(len(chunk_texts)), key=lambda i: -len(chunk_texts[i]))
    batches = (
        order[i : i + BASELINE_BATCH_SIZE] for i in range(0, len(order), BASELINE_BATCH_SIZE)
    )
    return {
        "real": sum(lengths),
        "padded": sum(len(b) * max(lengths[i] for i in b) for b in batches),
    }


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    """A plain, aligned text table."""
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows, strict=True)]
    lines = [headers, ["-" * w for w in widths], *rows]
    return "\n".join(
        "  ".join(str(c).rjust(w) for c, w in zip(line, widths, strict=True)) for line in lines
    )


def summarise(ours: list[OursRun], baseline_s: list[float], num_chunks: int) -> dict[str, Any]:
    """Medians and overheads; the headline overhead pairs each repeat's two runs."""
    ours_s = statistics.median(r.total_s for r in ours)
    base_s = statistics.median(baseline_s)
    paired = [o.total_s / b - 1 for o, b in zip(ours, baseline_s, strict=True)]
    overhead = statistics.median(paired)
    return {
        "ours_s": ours_s,
        "baseline_s": base_s,
        "ours_chunks_per_s": num_chunks / ours_s,
        "baseline_chunks_per_s": num_chunks / base_s,
        "overhead": overhead,
        "overhead_of_medians": ours_s / base_s - 1,
        "overhead_per_repeat": paired,
        "meets_target": overhead <= TARGET_OVERHEAD,
        "ours_split_s": {
            "chunk": statistics.median(r.chunk_s for r in ours),
            "embed": statistics.median(r.embed_s for r in ours),
            "write": statistics.median(r.write_s for r in ours),
            "other": statistics.median(r.other_s for r in ours),
        },
    }


def print_report(
    args: argparse.Namespace,
    num_docs: int,
    num_chunks: int,
    s: dict[str, Any],
    tokens: dict[str, int],
) -> None:
    """The human-readable part of the output."""
    print(
        f"\nIngestion: {num_docs} MuSiQue passages -> {num_chunks} chunks, "
        f"median of {args.repeats} repeat(s), index {args.index_type}\n"
    )
    rows = [
        ["ours (Collection.ingest)", f"{s['ours_s']:.2f}", f"{s['ours_chunks_per_s']:.1f}"],
        ["baseline (model.encode)", f"{s['baseline_s']:.2f}", f"{s['baseline_chunks_per_s']:.1f}"],
    ]
    print(format_table(["", "time s", "chunks/s"], rows))
    verdict = "meets" if s["meets_target"] else "MISSES"
    print(
        f"\noverhead (median of paired repeats): {s['overhead']:+.1%}  "
        f"({verdict} the {TARGET_OVERHEAD:.0%} target); "
        f"ratio of medians: {s['overhead_of_medians']:+.1%}"
    )
    split = s["ours_split_s"]
    print(
        "\nwhere ours spends its time (median s): "
        + ", ".join(f"{k} {v:.2f} ({v / s['ours_s']:.0%})" for k, v in split.items())
    )
    print(f"model tokens: {tokens['padded']} incl. padding, {tokens['real']} without (both sides)")
    print(f"\nreproduce: python {shlex.join(sys.argv)}")


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print the table, the command line and the JSON figures."""
    args = parse_args(argv)
    if args.torch_threads is not None:
        torch.set_num_threads(args.torch_threads)
    torch.manual_seed(SEED)  # nothing here is random; fixed anyway, as for every benchmark
    docs = load_documents(args.data_dir, args.num_docs)
    embedder = Embedder()
    chunk_texts = chunk_texts_of(embedder, docs, args.index_type)
    embedder.embed(chunk_texts[:BASELINE_BATCH_SIZE], batch_size=BASELINE_BATCH_SIZE)  # warm-up
    load_1m = os.getloadavg()[0]
    ours: list[OursRun] = []
    baseline_s: list[float] = []
    for repeat in range(args.repeats):
        if repeat % 2 == 0:
            ours.append(run_ours(embedder, docs, args.index_type))
            baseline_s.append(run_baseline(embedder, chunk_texts))
        else:
            baseline_s.append(run_baseline(embedder, chunk_texts))
            ours.append(run_ours(embedder, docs, args.index_type))
        if ours[-1].num_chunks != len(chunk_texts):
            sys.exit(
                f"error: ingestion made {ours[-1].num_chunks} chunks, expected {len(chunk_texts)}"
            )
    summary = summarise(ours, baseline_s, len(chunk_texts))
    tokens = padded_tokens(embedder, chunk_texts)
    print_report(args, len(docs), len(chunk_texts), summary, tokens)
    record = {
        "benchmark": "ingest",
        "num_docs": len(docs),
        "num_chunks": len(chunk_texts),
        "repeats": args.repeats,
        "index_type": args.index_type,
        "embedding_model": embedder.model_id,
        "batch_size": BASELINE_BATCH_SIZE,
        **summary,
        "padded_tokens": tokens,
        "ours_runs": [asdict(r) for r in ours],
        "baseline_runs_s": baseline_s,
        "target_overhead": TARGET_OVERHEAD,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "loadavg_1m_at_start": load_1m,
        "loadavg_1m_at_end": os.getloadavg()[0],
        "command": f"python {shlex.join(sys.argv)}",
    }
    print(json.dumps(record))


if __name__ == "__main__":
    main()
