"""Reading knowledge-graph files: ``subject|relation|object`` lines, TSV, or JSONL."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path


def declared_functional(path: Path) -> set[str]:
    if path.suffix == ".jsonl":
        return set()
    declared: set[str] = set()
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("# functional:"):
                declared |= {r.strip() for r in line.split(":", 1)[1].split(",") if r.strip()}
    return declared


def read_rows(path: Path, width: int) -> Iterable[tuple[str, ...]]:
    separator = "\t" if path.suffix == ".tsv" else "|"
    with path.open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            fields = [f.strip() for f in line.split(separator)]
            if len(fields) != width or not all(fields):
                raise ValueError(
                    f"{path.name} line {line_no}: "
                    f"expected {width} fields separated by {separator!r}"
                )
            yield tuple(fields)


def read_triples(path: Path) -> Iterable[tuple[str, str, str]]:
    if path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as handle:
            for line_no, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    yield str(record["subject"]), str(record["relation"]), str(record["object"])
                except (json.JSONDecodeError, KeyError, TypeError) as exc:
                    raise ValueError(
                        f"{path.name} line {line_no}: expected subject, relation, object"
                    ) from exc
        return
    for row in read_rows(path, 3):
        yield row[0], row[1], row[2]
