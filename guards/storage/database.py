"""The stores' database layer: SQLAlchemy Core engines with a connection pool, SQLite by default,
PostgreSQL through the same SQL.

The stores write their SQL once, with ``?`` placeholders, and run it on a pooled connection as
the driver's own SQL (``exec_driver_sql``); for PostgreSQL (psycopg) the placeholders become
``%s``. Every write runs inside ``transaction()``: either all of its statements are committed or
none is, so a crash never leaves half a change (a review's new status without its audit row).
Transactions run on connections of their own, so on PostgreSQL concurrent requests of one process
(and of several processes) proceed side by side; SQLite serialises writers itself (``BEGIN
IMMEDIATE`` takes its write lock up front, waiting up to ``busy_timeout_s``), while its readers
never wait (WAL).
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, CursorResult, Engine

_PLACEHOLDER = re.compile(r"\?")
_IMMEDIATE = "ragguard_immediate"
"""Connection execution option: begin the SQLite transaction with BEGIN IMMEDIATE."""


class Cursor:
    """Runs statements of one transaction; ``rowcount`` of the last one."""

    def __init__(self, conn: Connection):
        self.connection = conn
        self.dialect = conn.dialect.name
        """``sqlite`` or ``postgresql``."""
        self._translate = self.dialect == "postgresql"
        self._result: CursorResult[Any] | None = None

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        if self._translate:
            sql = _PLACEHOLDER.sub("%s", sql.replace("%", "%%"))
        self._result = self.connection.exec_driver_sql(sql, tuple(params))
        return self

    def fetchone(self) -> tuple[Any, ...] | None:
        assert self._result is not None
        row = self._result.fetchone()
        return None if row is None else tuple(row)

    def fetchall(self) -> list[tuple[Any, ...]]:
        assert self._result is not None
        return [tuple(r) for r in self._result.fetchall()]

    @property
    def rowcount(self) -> int:
        assert self._result is not None
        return int(self._result.rowcount)

    def table_exists(self, name: str) -> bool:
        if self.dialect == "sqlite":
            sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
        else:
            sql = "SELECT 1 FROM information_schema.tables WHERE table_name = ?"
        return self.execute(sql, (name,)).fetchone() is not None


def database_url(url: str | Path) -> str:
    """An SQLAlchemy URL for ``url``: ``postgresql://`` (psycopg), ``sqlite:///PATH`` or a path."""
    text = str(url)
    if text.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + text.split("://", 1)[1]
    if text.startswith("postgresql+"):
        return text
    path = Path(text.removeprefix("sqlite:///").removeprefix("sqlite://"))
    return f"sqlite:///{path}"


def _enter_wal(dbapi_conn: Any, timeout_s: float) -> None:
    """``PRAGMA journal_mode=WAL``, retried while another connection holds the file's lock:
    SQLite answers the switch with "database is locked" at once, without waiting as other
    statements do (servers opening one new database together hit it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            dbapi_conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


class Database:
    """A pooled SQLAlchemy engine; ``dialect`` is ``sqlite`` or ``postgresql``."""

    def __init__(
        self,
        url: str | Path,
        *,
        busy_timeout_s: float = 30.0,
        pool_size: int = 5,
        max_overflow: int = 10,
    ):
        self.url = str(url)
        sa_url = database_url(url)
        if sa_url.startswith("postgresql"):
            self.dialect = "postgresql"
            self.engine = self._postgresql_engine(sa_url, pool_size, max_overflow)
        else:
            self.dialect = "sqlite"
            Path(sa_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
            self.engine = self._sqlite_engine(sa_url, busy_timeout_s, pool_size, max_overflow)

    @staticmethod
    def _postgresql_engine(url: str, pool_size: int, max_overflow: int) -> Engine:
        try:
            import psycopg  # noqa: F401
        except ImportError as exc:
            raise ImportError(
                "a PostgreSQL store needs psycopg: pip install 'psycopg[binary]'"
            ) from exc
        return create_engine(
            url, pool_size=pool_size, max_overflow=max_overflow, pool_pre_ping=True
        )

    @staticmethod
    def _sqlite_engine(
        url: str, busy_timeout_s: float, pool_size: int, max_overflow: int
    ) -> Engine:
        engine = create_engine(
            url,
            pool_size=pool_size,
            max_overflow=max_overflow,
            connect_args={"check_same_thread": False, "timeout": busy_timeout_s},
        )

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _: Any) -> None:
            # pysqlite's own transaction handling is off: we say when transactions begin.
            dbapi_conn.isolation_level = None
            # WAL: readers never block the writer; FULL: a commit is on disk when COMMIT returns.
            _enter_wal(dbapi_conn, busy_timeout_s)
            dbapi_conn.execute("PRAGMA synchronous=FULL")
            dbapi_conn.execute("PRAGMA foreign_keys=ON")

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            # IMMEDIATE takes the write lock up front, so a read-then-write cannot race.
            immediate = conn.get_execution_options().get(_IMMEDIATE, False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

        return engine

    @contextmanager
    def transaction(self) -> Iterator[Cursor]:
        """All statements inside commit together; an exception rolls every one back."""
        with self.engine.connect() as conn:
            conn = conn.execution_options(**{_IMMEDIATE: True})
            with conn.begin():
                yield Cursor(conn)

    @contextmanager
    def read(self) -> Iterator[Cursor]:
        """A consistent read (one transaction, nothing written)."""
        with self.engine.connect() as conn, conn.begin() as tx:
            try:
                yield Cursor(conn)
            finally:
                tx.rollback()

    def close(self) -> None:
        self.engine.dispose()
