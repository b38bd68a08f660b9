"""Ingestion throughput: ``Collection.ingest`` against a bare ``SentenceTransformer.encode``,
and what committing in small groups costs against one commit per 4,096 chunks.

Every side sees exactly the same chunk texts (real MuSiQue passages, chunked beforehand with the
collection's own chunker). Ours additionally chunks, writes SQLite rows and updates and persists
FAISS; the overhead is what that costs on top of embedding. Ours runs twice per repeat: with the
default commit groups (``RAGGUARD_INGEST_GROUP_CHUNKS`` / ``_S``, so a crash loses little) and
with the earlier policy (one commit per 4,096 chunks). The three runs rotate their order on every
repeat, so that drifting machine load hits all alike. ``--prefill N`` first fills each index with
N random vectors: every commit rewrites the whole FAISS file, so commits cost more in a big index.

    python benchmarks/ingest.py --num-docs 1000 --repeats 3
    python benchmarks/ingest.py --num-docs 1890 --repeats 3 --prefill 100000

The last line of stdout is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rag.retrieval.collection import CollectionRegistry, CommitPolicy
from rag.retrieval.documents import Chunk, Chunker, Document
from rag.retrieval.embed import Embedder
from rag.settings import Settings

SEED = 0
BASELINE_BATCH_SIZE = 64
TARGET_OVERHEAD = 0.15
TARGET_GROUPING_OVERHEAD = 0.05
PREVIOUS_POLICY = CommitPolicy(max_chunks=4096, max_seconds=math.inf, max_commit_share=0.0)
"""Before commit groups were bounded: one commit per 4,096 chunks, however long they took."""
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
    num_commits: int
    model_tokens: int
    """Tokens the model ran on, padding included: the work, free of the machine's noise."""

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
        "--prefill", type=int, default=0, help="random vectors already in the index (default 0)"
    )
    parser.add_argument(
        "--torch-threads", type=int, default=None, help="torch intra-op threads (default: cores)"
    )
    args = parser.parse_args(argv)
    if args.num_docs < 1 or args.repeats < 1 or args.prefill < 0:
        parser.error("--num-docs and --repeats must be at least 1, --prefill at least 0")
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
def timed_method(
    obj: Any, name: str, totals: dict[str, float], first_args: list[Any] | None = None
) -> Iterator[None]:
    """Accumulate the wall time of ``obj.name`` calls in ``totals[name]`` and their number in
    ``totals[name + "#calls"]`` (instance-level patch); collect their first arguments in
    ``first_args`` if given."""
    original: Callable[..., Any] = getattr(obj, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if first_args is not None:
            first_args.append(args[0])
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            totals[name] = totals.get(name, 0.0) + time.perf_counter() - started
            totals[name + "#calls"] = totals.get(name + "#calls", 0) + 1

    setattr(obj, name, wrapper)
    try:
        yield
    finally:
        delattr(obj, name)  # the class attribute shows through again


def build_template(embedder: Embedder, root: Path, index_type: str, prefill: int) -> Path | None:
    """An index holding ``prefill`` random unit vectors, copied before each run; None for 0."""
    if prefill == 0:
        return None
    registry = CollectionRegistry(root, embedder, index_type=index_type)
    index = registry.get("bench", create=True).index
    rng = np.random.default_rng(SEED)
    for start in range(0, prefill, 10_000):
        count = min(10_000, prefill - start)
        vectors = rng.standard_normal((count, embedder.dimension)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        upserts = []
        for i, vector in enumerate(vectors, start):
            doc = Document(f"prefill {i}", f"prefill {i}")
            upserts.append((doc, [Chunk(f"{doc.doc_id}#0", doc.doc_id, 0, doc.text)], vector[None]))
        index.write(upserts)
    registry.close()
    return root / "bench"


def run_ours(
    embedder: Embedder,
    docs: list[Document],
    index_type: str,
    policy: CommitPolicy,
    template: Path | None,
) -> OursRun:
    """Ingest ``docs`` into a fresh collection (a copy of ``template`` if given) in a temporary
    folder under ``policy``, timing each stage."""
    with tempfile.TemporaryDirectory(prefix="ragguard-bench-") as tmp:
        if template is not None:
            shutil.copytree(template, Path(tmp) / "bench")
        registry = CollectionRegistry(
            Path(tmp), embedder, index_type=index_type, commit_policy=policy
        )
        totals: dict[str, float] = {}
        batches: list[list[str]] = []
        with timed_method(embedder, "embed", totals, batches):
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
        num_commits=int(totals.get("write#calls", 0)),
        model_tokens=sum(len(b) * max(map(token_count(embedder), b)) for b in batches if b),
    )


_TOKEN_COUNTS: dict[str, int] = {}


def token_count(embedder: Embedder) -> Callable[[str], int]:
    """Tokens the model runs on for one text (special tokens included, truncated), cached."""

    def count(text: str) -> int:
        if text not in _TOKEN_COUNTS:
            tokens = len(embedder.tokenize(text)) + 2
            _TOKEN_COUNTS[text] = min(tokens, embedder.max_seq_length)
        return _TOKEN_COUNTS[text]

    return count


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
    """Tokens the baseline's model runs on, with padding (``encode`` sorts the texts longest-first
    by characters and batches them by 64) and without."""
    count = token_count(embedder)
    ordered = sorted(chunk_texts, key=lambda t: -len(t))
    size = BASELINE_BATCH_SIZE
    batches = [ordered[i : i + size] for i in range(0, len(ordered), size)]
    return {
        "real": sum(map(count, chunk_texts)),
        "padded": sum(len(b) * max(map(count, b)) for b in batches),
    }


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    """A plain, aligned text table."""
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows, strict=True)]
    lines = [headers, ["-" * w for w in widths], *rows]
    return "\n".join(
        "  ".join(str(c).rjust(w) for c, w in zip(line, widths, strict=True)) for line in lines
    )


def summarise(
    ours: list[OursRun], previous: list[OursRun], baseline_s: list[float], num_chunks: int
) -> dict[str, Any]:
    """Medians and overheads; each headline overhead pairs the runs of one repeat."""
    ours_s = statistics.median(r.total_s for r in ours)
    previous_s = statistics.median(r.total_s for r in previous)
    base_s = statistics.median(baseline_s)
    paired = [o.total_s / b - 1 for o, b in zip(ours, baseline_s, strict=True)]
    overhead = statistics.median(paired)
    grouping = [o.total_s / p.total_s - 1 for o, p in zip(ours, previous, strict=True)]
    return {
        "previous_s": previous_s,
        "ours_commits": statistics.median(r.num_commits for r in ours),
        "previous_commits": statistics.median(r.num_commits for r in previous),
        "grouping_overhead": statistics.median(grouping),
        "grouping_overhead_of_medians": ours_s / previous_s - 1,
        "grouping_overhead_per_repeat": grouping,
        "meets_grouping_target": statistics.median(grouping) <= TARGET_GROUPING_OVERHEAD,
        "ours_write_s": round(statistics.median(r.write_s for r in ours), 2),
        "ours_model_tokens": statistics.median(r.model_tokens for r in ours),
        "previous_model_tokens": statistics.median(r.model_tokens for r in previous),
        "previous_write_s": round(statistics.median(r.write_s for r in previous), 2),
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
        f"median of {args.repeats} repeat(s), index {args.index_type}, "
        f"{args.prefill} vectors in the index before\n"
    )

    def row(name: str, key: str) -> list[str]:
        work = [s.get(f"{key}_{k}", "") for k in ("commits", "write_s", "model_tokens")]
        return [name, f"{s[key + '_s']:.2f}", f"{num_chunks / s[key + '_s']:.1f}", *map(str, work)]

    rows = [
        row("ours, commit groups (default)", "ours"),
        row("ours, one commit per 4,096 chunks", "previous"),
    ]
    rows.append([*row("baseline (model.encode)", "baseline")[:-1], str(tokens["padded"])])
    print(format_table(["", "time s", "chunks/s", "commits", "commit s", "model tokens"], rows))
    verdict = "meets" if s["meets_grouping_target"] else "MISSES"
    print(
        f"\ncommit groups vs one commit per 4,096 chunks (median of paired repeats): "
        f"{s['grouping_overhead']:+.1%} ({verdict} the {TARGET_GROUPING_OVERHEAD:.0%} target); "
        f"ratio of medians: {s['grouping_overhead_of_medians']:+.1%}; per repeat: "
        + ", ".join(f"{x:+.1%}" for x in s["grouping_overhead_per_repeat"])
    )
    verdict = "meets" if s["meets_target"] else "MISSES"
    print(
        f"overhead over bare embedding (median of paired repeats): {s['overhead']:+.1%}  "
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
    defaults = CommitPolicy.from_settings(Settings(_env_file=None))
    load_1m = os.getloadavg()[0]
    ours: list[OursRun] = []
    previous: list[OursRun] = []
    baseline_s: list[float] = []
    with tempfile.TemporaryDirectory(prefix="ragguard-bench-template-") as tmp:
        template = build_template(embedder, Path(tmp), args.index_type, args.prefill)
        runs: list[Callable[[], None]] = [
            lambda: ours.append(run_ours(embedder, docs, args.index_type, defaults, template)),
            lambda: previous.append(
                run_ours(embedder, docs, args.index_type, PREVIOUS_POLICY, template)
            ),
            lambda: baseline_s.append(run_baseline(embedder, chunk_texts)),
        ]
        for repeat in range(args.repeats):
            for i in range(len(runs)):
                runs[(repeat + i) % len(runs)]()
            for run in (ours[-1], previous[-1]):
                if run.num_chunks != len(chunk_texts):
                    sys.exit(
                        f"error: ingestion made {run.num_chunks} chunks, "
                        f"expected {len(chunk_texts)}"
                    )
    summary = summarise(ours, previous, baseline_s, len(chunk_texts))
    tokens = padded_tokens(embedder, chunk_texts)
    print_report(args, len(docs), len(chunk_texts), summary, tokens)
    record = {
        "benchmark": "ingest",
        "num_docs": len(docs),
        "num_chunks": len(chunk_texts),
        "repeats": args.repeats,
        "index_type": args.index_type,
        "prefill": args.prefill,
        "commit_policy": asdict(defaults),
        "previous_commit_policy": {**asdict(PREVIOUS_POLICY), "max_seconds": "inf"},
        "embedding_model": embedder.model_id,
        "batch_size": BASELINE_BATCH_SIZE,
        **summary,
        "padded_tokens": tokens,
        "ours_runs": [asdict(r) for r in ours],
        "previous_runs": [asdict(r) for r in previous],
        "baseline_runs_s": baseline_s,
        "target_overhead": TARGET_OVERHEAD,
        "target_grouping_overhead": TARGET_GROUPING_OVERHEAD,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "loadavg_1m_at_start": load_1m,
        "loadavg_1m_at_end": os.getloadavg()[0],
        "command": f"python {shlex.join(sys.argv)}",
    }
    print(json.dumps(record))


if __name__ == "__main__":
    main()
