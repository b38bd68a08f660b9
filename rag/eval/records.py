"""The records of a run: one JSON object per item in ``items.jsonl``, and what goes in them."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from rag.errors import InvalidInputError
from rag.eval.items import EvalItem
from rag.types import GuardReport, Passage

logger = logging.getLogger(__name__)
RETRIEVAL_DEPTH = 10
"""Documents ranked per question for recall@k and MRR (k up to this)."""


def read_records(path: Path) -> dict[str, dict[str, Any]]:
    """The records of ``items.jsonl`` by item id. A torn last line (the process was killed while
    writing it) is cut off; a bad line elsewhere is an error."""
    if not path.is_file():
        return {}
    records: dict[str, dict[str, Any]] = {}
    lines = path.read_bytes().split(b"\n")
    good_bytes = 0
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            good_bytes += len(line) + 1
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:  # invalid JSON, or UTF-8 cut in the middle of a character
            if line_no < len(lines) and any(rest.strip() for rest in lines[line_no:]):
                raise InvalidInputError(f"{path} line {line_no}: not a record ({exc})") from exc
            logger.warning("%s: dropping a torn last line", path)
            with path.open("r+b") as handle:
                handle.truncate(good_bytes)
            break
        records[record["id"]] = record
        good_bytes += len(line) + 1
    return records


def passage_record(p: Passage) -> dict[str, Any]:
    return {
        "doc_id": p.doc_id,
        "chunk_id": p.chunk_id,
        "score": p.score,
        "text": p.text,  # whole: the guards can be re-run on the record offline
    }


def verdict_record(v: GuardReport) -> dict[str, Any]:
    return {"name": v.name, "outcome": v.outcome, "score": v.score, "reason": v.reason}


def _same_text(a: str, b: str) -> bool:
    a, b = " ".join(a.split()), " ".join(b.split())
    return bool(a and b) and (a in b or b in a)


def gold_ranks(item: EvalItem, ranked: list[Passage]) -> list[int | None]:
    """For each gold passage, the rank (from 1) of its document among the distinct documents
    retrieved, or None when it was not retrieved."""
    doc_ids = list(dict.fromkeys(p.doc_id for p in ranked))[:RETRIEVAL_DEPTH]
    rank = {doc_id: r for r, doc_id in enumerate(doc_ids, start=1)}
    ranks: list[int | None] = [rank.get(g) for g in item.gold_passage_ids]
    for gold in item.gold_passages:
        hits = [rank[p.doc_id] for p in ranked if p.doc_id in rank and _same_text(p.text, gold)]
        ranks.append(min(hits) if hits else None)
    return ranks
