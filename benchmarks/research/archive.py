"""Labelled generations kept in the repository: the model's outputs, without the data sets' text.

A ``ragguard eval`` run folder holds the questions, the gold answers and every passage's text:
the public data sets' content, which stays where the data sets are. ``pack`` keeps what the
generator and the guards produced (answers, samples with log-probabilities, the judge's and
self-verification's probabilities, timings, which chunks were shown and their scores) in one
gzipped JSONL file per set; ``unpack`` rebuilds the run folder from it and a copy of the data
sets: the items from the built-in loader, each passage's text by chunking its document again
with the chunker the index used. The benchmarks then read the rebuilt folder as any other run.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path
from typing import Any

from rag.errors import InvalidInputError
from rag.eval.items import write_items
from rag.eval.records import read_records

FORMAT = "ragguard-labelled-records/1"
DATA_FIELDS = ("question",)
"""Record fields that are the data set's own text (rebuilt from it)."""


def text_digest(text: str) -> str:
    """A short hash of a passage's text: unpacking checks the rebuilt text against it."""
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _strip(record: dict[str, Any]) -> dict[str, Any]:
    kept = {k: v for k, v in record.items() if k not in DATA_FIELDS}
    kept["passages"] = [
        {**{k: v for k, v in p.items() if k != "text"}, "text_sha": text_digest(p["text"])}
        for p in record.get("passages", [])
    ]
    # Reasons quote the answer and the passages; the guards are re-run on unpacking anyway.
    kept["guards"] = [{k: v for k, v in g.items() if k != "reason"} for g in kept.get("guards", [])]
    kept["decision_reasons"] = []
    return kept


def index_chunking(run_dir: Path) -> tuple[int, int]:
    """How the run's index chunked its documents (the effective size, capped to the embedder's
    window), from the run's ``results.json``."""
    results = run_dir / "results.json"
    if not results.is_file():
        raise InvalidInputError(f"{run_dir}: no results.json to read the index's chunking from")
    index = json.loads(results.read_text())["configs"][0]["index"]
    return int(index["chunk_size"]), int(index["chunk_overlap"])


def pack(run_dir: Path, out_file: Path) -> int:
    """Write ``run_dir``'s records (one configuration) to ``out_file``; the number written."""
    chunk_size, chunk_overlap = index_chunking(run_dir)
    configs = [p for p in run_dir.iterdir() if (p / "items.jsonl").is_file()]
    if len(configs) != 1:
        raise InvalidInputError(f"{run_dir}: expected one configuration folder")
    records = read_records(configs[0] / "items.jsonl")
    run = (
        json.loads((configs[0] / "run.json").read_text())
        if (configs[0] / "run.json").is_file()
        else {}
    )
    header = {
        "format": FORMAT,
        "dataset": run_dir.name,
        "config": configs[0].name,
        "limit": _limit(run_dir),
        "run": {k: v for k, v in run.items() if k in ("fingerprint", "sessions")},
        "chunk_size": chunk_size,
        "chunk_overlap": chunk_overlap,
    }
    out_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_file.with_name(out_file.name + ".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as out:
        out.write(json.dumps(header) + "\n")
        for record in sorted(records.values(), key=lambda r: r["position"]):
            out.write(json.dumps(_strip(record), ensure_ascii=False) + "\n")
    tmp.replace(out_file)
    return len(records)


def _limit(run_dir: Path) -> int:
    with (run_dir / "dataset.jsonl").open(encoding="utf-8") as lines:
        return sum(1 for line in lines if line.strip())


def read_archive(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        header = json.loads(next(lines))
        if header.get("format") != FORMAT:
            raise InvalidInputError(f"{path}: not a {FORMAT} archive")
        return header, [json.loads(line) for line in lines if line.strip()]


def unpack(path: Path, data_dir: Path, out_dir: Path) -> Path:
    """Rebuild the run folder ``out_dir/<set>/`` of an archive from the data sets in
    ``data_dir``, chunked as the run's index chunked them; a passage whose rebuilt text differs
    from the recorded one (another copy of the data, another chunker) is an error."""
    from rag.eval.prepare import prepare
    from rag.retrieval.documents import Chunker
    from rag.retrieval.embed import Embedder

    header, records = read_archive(path)
    prepared = prepare(header["dataset"], data_dir)
    items = prepared.items[: header["limit"]]
    by_id = {item.id: item for item in items}
    wanted = {p["doc_id"] for r in records for p in r.get("passages", [])}
    chunker = Chunker(Embedder().tokenize, header["chunk_size"], header["chunk_overlap"])
    texts = {
        chunk.chunk_id: chunk.text
        for doc in prepared.documents
        if doc.doc_id in wanted
        for chunk in chunker.split(doc)
    }
    run_dir = out_dir / header["dataset"]
    (run_dir / header["config"]).mkdir(parents=True, exist_ok=True)
    write_items(items, run_dir / "dataset.jsonl")
    with (run_dir / header["config"] / "items.jsonl").open("w", encoding="utf-8") as out:
        for r in records:
            item = by_id.get(r["id"])
            if item is None:
                raise InvalidInputError(f"{path}: item {r['id']} is not in {header['dataset']}")
            bad = [
                p["chunk_id"]
                for p in r.get("passages", [])
                if text_digest(texts.get(p["chunk_id"], "")) != p["text_sha"]
            ]
            if bad:
                raise InvalidInputError(
                    f"{path}: chunks {bad} are not in the data set as chunked here (another copy "
                    "of the data, or another chunker)"
                )
            passages = [
                {**{k: v for k, v in p.items() if k != "text_sha"}, "text": texts[p["chunk_id"]]}
                for p in r.get("passages", [])
            ]
            full = {**r, "question": item.question, "passages": passages}
            out.write(json.dumps(full, ensure_ascii=False) + "\n")
    return run_dir
