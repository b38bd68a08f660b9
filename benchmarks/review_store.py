"""Review store at scale: the schema-3 indexes against the same database without them.

    python benchmarks/review_store.py                    # 100,000 items (about 2 minutes)
    python benchmarks/review_store.py --num-items 20000  # smaller

One SQLite database is filled with ``--num-items`` queued answers (10 index versions, gold items
mixed in at 10 %), then copied; the copy has the four schema-3 indexes dropped (the layout before
schema 3). Both are timed side by side, alternating, on what a busy queue does all day:

- queueing a flagged answer (with gold items mixed in, the store picks the next gold item due);
- exporting (``export_items``, 500 per page) the first 10,000 items;
- approving an answer on a new index version (it enters the answer cache, which drops the
  previous version's rows).

Medians over the rounds; the last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from guards.review import NewItem, Resolution, ReviewStore, intake  # noqa: E402

SCHEMA_3_INDEXES = (
    "review_by_gold",
    "review_by_created",
    "review_by_index_version",
    "answer_cache_by_index",
)
NUM_VERSIONS = 10


def flagged(question: str, version: int) -> NewItem:
    return NewItem(
        question=question,
        answer="The tower is 330 metres tall [1].",
        candidates=["The tower is 330 metres tall [1].", "About 300 m."],
        passages=[{"doc_id": "t", "chunk_id": "t#0", "text": "It is 330 m tall.", "score": 0.8}],
        guard_results=[
            {"name": "grounding", "outcome": "pass", "score": 0.9, "reason": "", "evidence": {}}
        ],
        confidence=0.4,
        reasons=["confidence 0.40 < 0.7"],
        index_name="demo",
        index_version=f"v{version}",
        request_id=uuid.uuid4().hex,
    )


def build(path: Path, num_items: int) -> None:
    """Fill a fresh store in one transaction (``add`` commits and syncs each item: hours)."""
    store = ReviewStore(path, gold_rate=0.1)
    gold_ids = [
        store.add_gold(f"gold {i}?", f"answer {i}.", is_correct=i % 2 == 0) for i in range(50)
    ]
    with store.db.transaction() as cur:
        for i in range(num_items):
            version = i * NUM_VERSIONS // num_items
            gold_id = gold_ids[i % 50] if i % 10 == 9 else None
            new = flagged(f"question {i}?", version)
            intake.insert(cur, new, float(i), 0.4, store.sla_s, gold_id=gold_id)
    store.close()


def timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def operations(store: ReviewStore, round_no: int) -> dict[str, Callable[[], object]]:
    def queue() -> None:
        store.add(flagged(f"new question {round_no}?", NUM_VERSIONS - 1))

    def export() -> None:
        for _ in itertools.islice(store.export_items(page_size=500), 10_000):
            pass

    # A new index version each round: its approval prunes the previous round's cached answer.
    pending = store.add(flagged(f"to approve {round_no}?", NUM_VERSIONS + round_no))

    def approve() -> None:
        store.claim(pending.id, "ann")
        store.resolve(pending.id, "ann", Resolution.APPROVE)

    return {"queue_one_s": queue, "export_10k_s": export, "approve_s": approve}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-items", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        indexed, bare = Path(tmp) / "schema3.sqlite", Path(tmp) / "no-indexes.sqlite"
        started = time.perf_counter()
        build(indexed, args.num_items)
        build_s = time.perf_counter() - started
        shutil.copy(indexed, bare)
        store = ReviewStore(bare)
        with store.db.transaction() as cur:
            for name in SCHEMA_3_INDEXES:
                cur.execute(f"DROP INDEX {name}")
        store.close()
        stores = {
            "schema3": ReviewStore(indexed, gold_rate=0.1),
            "no_indexes": ReviewStore(bare, gold_rate=0.1),
        }
        samples: dict[str, dict[str, list[float]]] = {name: {} for name in stores}
        for round_no in range(args.rounds):
            for name, store in stores.items():  # alternated: a slow spell hits both
                for op, run in operations(store, round_no).items():
                    samples[name].setdefault(op, []).append(timed(run))
        for store in stores.values():
            store.close()
    medians = {
        name: {op: statistics.median(v) for op, v in ops.items()} for name, ops in samples.items()
    }
    speedups = {op: medians["no_indexes"][op] / medians["schema3"][op] for op in medians["schema3"]}
    print(f"{args.num_items:,} items, built in {build_s:.1f} s; medians of {args.rounds} rounds")
    print(f"  {'operation':14s} {'no indexes':>12s} {'schema 3':>12s} {'speed-up':>9s}")
    for op, ratio in speedups.items():
        print(
            f"  {op:14s} {medians['no_indexes'][op] * 1e3:10.1f}ms "
            f"{medians['schema3'][op] * 1e3:10.1f}ms {ratio:8.1f}x"
        )
    command = "python " + shlex.join(sys.argv)
    print(f"reproduce: {command}")
    result: dict[str, Any] = {
        "benchmark": "review_store",
        "num_items": args.num_items,
        "medians_s": medians,
        "speedup": speedups,
        "command": command,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
