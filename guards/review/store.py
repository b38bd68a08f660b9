"""A durable queue of answers awaiting review: SQLite in WAL mode, one committed row per item."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1


class ReviewStore:
    """``add`` commits an item before returning its id; ``get`` and ``pending`` read them back."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.executescript(
            """
            CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS review_items (
                id TEXT PRIMARY KEY,
                created_at REAL NOT NULL,
                status TEXT NOT NULL DEFAULT 'pending',
                question TEXT NOT NULL,
                answer TEXT NOT NULL,
                payload TEXT NOT NULL
            );
            CREATE INDEX IF NOT EXISTS review_by_status ON review_items(status, created_at);
            """
        )
        self._conn.execute(
            "INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
        )
        self._lock = threading.Lock()

    def add(self, question: str, answer: str, payload: dict[str, Any]) -> str:
        item_id = uuid.uuid4().hex
        with self._lock:
            self._conn.execute(
                "INSERT INTO review_items (id, created_at, question, answer, payload) "
                "VALUES (?, ?, ?, ?, ?)",
                (item_id, time.time(), question, answer, json.dumps(payload, default=str)),
            )
        return item_id

    def get(self, item_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT id, created_at, status, question, answer, payload FROM review_items "
                "WHERE id = ?",
                (item_id,),
            ).fetchone()
        if row is None:
            return None
        return {
            "id": row[0],
            "created_at": row[1],
            "status": row[2],
            "question": row[3],
            "answer": row[4],
            **json.loads(row[5]),
        }

    def pending(self, limit: int = 100) -> list[str]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT id FROM review_items WHERE status = 'pending' ORDER BY created_at LIMIT ?",
                (limit,),
            ).fetchall()
        return [r[0] for r in rows]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
