"""A small DB-API layer: SQLite by default, PostgreSQL through the same SQL.

The review store writes its SQL once, with ``?`` placeholders; for PostgreSQL (psycopg) they are
translated to ``%s``. Every write runs inside ``transaction()``: either all of its statements are
committed or none is, so a crash never leaves a status change without its audit row.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

_PLACEHOLDER = re.compile(r"\?")


class Cursor:
    """Runs statements of one transaction; ``rowcount`` of the last one."""

    def __init__(self, raw: Any, translate: bool):
        self._raw = raw
        self._translate = translate

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        if self._translate:
            sql = _PLACEHOLDER.sub("%s", sql.replace("%", "%%"))
        self._raw.execute(sql, tuple(params))
        return self

    def fetchone(self) -> tuple[Any, ...] | None:
        row = self._raw.fetchone()
        return None if row is None else tuple(row)

    def fetchall(self) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in self._raw.fetchall()]

    @property
    def rowcount(self) -> int:
        return int(self._raw.rowcount)


class Database:
    """One connection, serialised by a lock; ``dialect`` is ``sqlite`` or ``postgresql``."""

    def __init__(self, url: str | Path, *, busy_timeout_s: float = 30.0):
        self.url = str(url)
        self._lock = threading.RLock()
        if self.url.startswith(("postgresql://", "postgres://")):
            self.dialect = "postgresql"
            self._conn = self._connect_postgresql(self.url)
        else:
            self.dialect = "sqlite"
            path = Path(self.url.removeprefix("sqlite:///").removeprefix("sqlite://"))
            path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(
                path, check_same_thread=False, isolation_level=None, timeout=busy_timeout_s
            )
            # WAL: readers never block the writer; FULL: a commit is on disk when COMMIT returns.
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("PRAGMA foreign_keys=ON")

    @staticmethod
    def _connect_postgresql(url: str) -> Any:
        try:
            import psycopg
        except ImportError as exc:
            raise ImportError(
                "a PostgreSQL review store needs psycopg: pip install 'psycopg[binary]'"
            ) from exc
        return psycopg.connect(url, autocommit=True)

    @contextmanager
    def transaction(self) -> Iterator[Cursor]:
        """All statements inside commit together; an exception rolls every one back."""
        with self._lock:
            raw = self._conn.cursor()
            # IMMEDIATE takes SQLite's write lock up front, so a read-then-write cannot race.
            raw.execute("BEGIN IMMEDIATE" if self.dialect == "sqlite" else "BEGIN")
            try:
                yield Cursor(raw, self.dialect == "postgresql")
            except BaseException:
                raw.execute("ROLLBACK")
                raise
            try:
                raw.execute("COMMIT")
            except BaseException:
                with suppress(Exception):  # leave no open transaction behind a failed commit
                    raw.execute("ROLLBACK")
                raise

    @contextmanager
    def read(self) -> Iterator[Cursor]:
        """A consistent read (one transaction, nothing written)."""
        with self._lock:
            raw = self._conn.cursor()
            raw.execute("BEGIN")
            try:
                yield Cursor(raw, self.dialect == "postgresql")
            finally:
                raw.execute("ROLLBACK")

    def table_exists(self, cur: Cursor, name: str) -> bool:
        if self.dialect == "sqlite":
            sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
        else:
            sql = "SELECT 1 FROM information_schema.tables WHERE table_name = ?"
        return cur.execute(sql, (name,)).fetchone() is not None

    def close(self) -> None:
        with self._lock:
            self._conn.close()
