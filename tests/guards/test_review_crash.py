"""A committed review survives ``kill -9`` at any moment, and nothing half-written is visible."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from guards.review import ReviewStore, Status

ROOT = Path(__file__).resolve().parents[2]

# Adds items, claims them and resolves most, printing each step only once it is committed.
WRITER = """
import sys
from guards.review import Resolution, NewItem, Ratings, ReviewStore
store = ReviewStore(sys.argv[1], gold_rate=0.2)
store.add_gold("gold question?", "gold answer.", is_correct=True)
n = 0
while True:
    n += 1
    item = store.add(NewItem(f"question {n}?", "answer " * 50, candidates=["c"] * 4,
                             passages=[{"text": "p" * 500}], reasons=["low"], confidence=0.3))
    print("added", item.id, flush=True)
    store.claim(item.id, "writer")
    print("claimed", item.id, flush=True)
    if n % 3:
        store.resolve(item.id, "writer", Resolution.EDIT, edited_answer=f"edit {n}",
                      ratings=Ratings(relevance=n % 4, comment="c" * 200))
        print("edited", item.id, flush=True)
"""
STAGE = {"added": 0, "claimed": 1, "edited": 2}
REACHED = {Status.PENDING: 0, Status.CLAIMED: 1, Status.EDITED: 2}


def test_committed_items_survive_kill_9_and_nothing_is_half_written(tmp_path: Path) -> None:
    db = tmp_path / "reviews.sqlite"
    committed: dict[str, int] = {}
    rng = random.Random(7)
    for _ in range(6):
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(db)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        child.stdout.readline()  # it is running and writing
        time.sleep(rng.uniform(0.05, 0.5))
        os.kill(child.pid, signal.SIGKILL)
        out, _ = child.communicate()
        # Only whole lines claim a commit: the text after the last newline may be cut.
        for line in out.split("\n")[:-1]:
            stage, _, item_id = line.partition(" ")
            assert stage in STAGE and item_id, f"unexpected writer output {line!r}"
            committed[item_id] = max(committed.get(item_id, 0), STAGE[stage])
    assert len(committed) > 20

    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()
    store = ReviewStore(db)  # opens (and recovers the WAL) after every crash
    for item_id, reached in committed.items():
        item = store.get(item_id)
        assert REACHED[item.status] >= reached, item_id
        assert item.passages == [{"text": "p" * 500}] and item.answer == "answer " * 50
        if item.status is Status.EDITED:
            assert (
                item.edited_answer and item.ratings and len(item.ratings[0].ratings.comment) == 200
            )
    # Every item's state is the state its last audit row says: no change without its record.
    items, total = store.list_items(limit=100_000)
    assert total >= len(committed)
    raw = sqlite3.connect(db)
    for item in items:
        status = raw.execute("SELECT status FROM review_items WHERE id = ?", (item.id,)).fetchone()[
            0
        ]
        log = store.audit(item.id)
        assert log and log[0].action == "created"
        last = log[-1].after
        assert last is not None and last["status"] == status
    raw.close()
    store.close()
