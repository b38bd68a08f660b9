"""The review store's schema: an Alembic history (``guards/review/revisions``), upgraded on start.

Revisions ``0001`` to ``0005`` are the schemas 1 to 5 of the store's earlier migration runner,
which recorded them in a ``schema_version`` table (and the first store in ``meta``). A database
that runner made is stamped at its revision and brought forward with its rows kept. Every start
also records the schema number in ``schema_version``, so that a ragguard from before Alembic
refuses a database that a newer one has migrated.
"""

from __future__ import annotations

import time

from guards.review.errors import SchemaTooNewError
from guards.storage.database import Cursor, Database
from guards.storage.schema_history import SchemaHistory, UnknownRevisionError, upgrade

DEFAULT_SLA_S = 24 * 3600.0
"""Deadline given to items that predate deadlines, and the store's default SLA."""

HISTORY = SchemaHistory(
    "guards.review:revisions",
    version_table="ragguard_review_revision",
    lock_id=0x72616767,  # "ragg"
)
SCHEMA_VERSION = 7
"""The newest revision this code knows, as a number (revision ``0007``)."""


def _revision(version: int) -> str:
    return f"{version:04d}"


def legacy_version(cur: Cursor) -> int:
    """The schema the pre-Alembic runner recorded (0: none)."""
    if cur.table_exists("schema_version"):
        row = cur.execute("SELECT MAX(version) FROM schema_version").fetchone()
        return int(row[0]) if row and row[0] is not None else 0
    if cur.table_exists("meta"):  # the first store kept its version here
        row = cur.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row[0]) if row else 0
    return 0


def _too_new(found: object) -> SchemaTooNewError:
    return SchemaTooNewError(
        f"the review database is at schema {found}, newer than this ragguard's "
        f"{SCHEMA_VERSION}: upgrade ragguard, or open another database"
    )


def _bridge(cur: Cursor, current: str | None) -> str | None:
    """A database from the pre-Alembic runner: the revision to stamp it at."""
    legacy = legacy_version(cur)
    if legacy > SCHEMA_VERSION:
        raise _too_new(legacy)
    return _revision(legacy) if current is None and legacy else None


def _record(cur: Cursor, revision: str) -> None:
    """Keep ``schema_version`` in step, for ragguards from before Alembic."""
    cur.execute(
        "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
        "description TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
    )
    cur.execute(
        "INSERT INTO schema_version VALUES (?, ?, ?) ON CONFLICT (version) DO NOTHING",
        (int(revision), f"alembic revision {revision}", time.time()),
    )


def migrate(db: Database, *, to: int = SCHEMA_VERSION) -> int:
    """Apply every revision the database lacks, up to schema ``to``; returns the schema it ends
    at. A database a newer ragguard has migrated is refused (``SchemaTooNewError``): this code's
    statements may not fit its tables."""
    try:
        revision = upgrade(db, HISTORY, target=_revision(to), before=_bridge, after=_record)
    except UnknownRevisionError as exc:
        raise _too_new(exc.found) from exc
    return int(revision)
