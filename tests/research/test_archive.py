"""Labelled generations packed without the data sets' text, and rebuilt from the data sets."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.research.archive import pack, read_archive, unpack
from rag.eval.items import write_items

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
RECORDS = Path(__file__).resolve().parents[2] / "benchmarks" / "records"


@pytest.mark.model
def test_a_run_packs_without_data_text_and_unpacks_identical(tmp_path: Path) -> None:
    if not (DATA / "squad2").is_dir():
        pytest.skip(f"no public data sets at {DATA}")
    from rag.eval.prepare import prepare
    from rag.retrieval.documents import Chunker
    from rag.retrieval.embed import Embedder

    prepared = prepare("squad2", DATA)
    items = prepared.items[:3]
    docs = {d.doc_id: d for d in prepared.documents}
    chunker = Chunker(Embedder().tokenize, 254, 32)
    run = tmp_path / "runs" / "squad2"
    (run / "cfg").mkdir(parents=True)
    index = {"chunk_size": 254, "chunk_overlap": 32}
    (run / "results.json").write_text(json.dumps({"configs": [{"index": index}]}))
    write_items(items, run / "dataset.jsonl")
    records: list[dict[str, Any]] = []
    for position, item in enumerate(items):
        chunk = chunker.split(docs[item.gold_passage_ids[0]])[0]
        records.append(
            {
                "id": item.id,
                "position": position,
                "question": item.question,
                "answer": f"answer {position}",
                "guards": [
                    {"name": "grounding", "outcome": "pass", "score": 0.9, "reason": chunk.text}
                ],
                "decision_reasons": ["quoted"],
                "samples": [
                    {
                        "text": f"answer {position}",
                        "token_logprobs": [-0.1],
                        "finish_reason": "stop",
                    }
                ],
                "judgement": 0.75,
                "passages": [
                    {
                        "doc_id": chunk.doc_id,
                        "chunk_id": chunk.chunk_id,
                        "score": 0.5,
                        "text": chunk.text,
                    }
                ],
            }
        )
    (run / "cfg" / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    archive = tmp_path / "squad2.jsonl.gz"
    assert pack(run, archive) == 3
    raw = gzip.decompress(archive.read_bytes()).decode()
    for item, record in zip(items, records, strict=True):
        assert item.question not in raw and record["passages"][0]["text"] not in raw
    header, packed = read_archive(archive)
    assert header["dataset"] == "squad2" and header["limit"] == 3 and len(packed) == 3

    rebuilt = unpack(archive, DATA, tmp_path / "rebuilt")
    assert (rebuilt / "dataset.jsonl").read_text() == (run / "dataset.jsonl").read_text()
    back = [json.loads(line) for line in (rebuilt / "cfg" / "items.jsonl").read_text().splitlines()]
    for original, restored in zip(records, back, strict=True):
        assert restored["question"] == original["question"]
        assert restored["passages"] == original["passages"]
        assert restored["judgement"] == 0.75 and restored["samples"] == original["samples"]


@pytest.mark.model
@pytest.mark.slow
def test_the_committed_records_rebuild_from_the_data_sets(tmp_path: Path) -> None:
    archives = sorted(RECORDS.glob("*/*.jsonl.gz"))
    if not archives or not DATA.is_dir():
        pytest.skip("no committed records, or no public data sets")
    for archive in archives:
        header, records = read_archive(archive)
        rebuilt = unpack(archive, DATA, tmp_path / archive.parent.name)
        lines = (rebuilt / header["config"] / "items.jsonl").read_text().splitlines()
        assert len(lines) == len(records)
        assert all(p["text"] for line in lines for p in json.loads(line)["passages"])
