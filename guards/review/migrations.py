"""The review store's schema, as an ordered list of migrations.

``schema_version`` records every migration applied. A database made by the first store (schema 1,
which kept its version in a ``meta`` table) is recognised and brought forward with its rows kept.
Each migration runs in one transaction, so an interrupted upgrade leaves the previous version.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from guards.review.backend import Cursor, Database
from guards.review.errors import SchemaTooNewError
from guards.review.models import priority_of

logger = logging.getLogger(__name__)

DEFAULT_SLA_S = 24 * 3600.0
"""Deadline given to rows that predate deadlines."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    description: str
    apply: Callable[[Database, Cursor], None]


def _v1_queue(db: Database, cur: Cursor) -> None:
    cur.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    cur.execute(
        """CREATE TABLE IF NOT EXISTS review_items (
            id TEXT PRIMARY KEY,
            created_at DOUBLE PRECISION NOT NULL,
            status TEXT NOT NULL DEFAULT 'pending',
            question TEXT NOT NULL,
            answer TEXT NOT NULL,
            payload TEXT NOT NULL
        )"""
    )
    cur.execute("CREATE INDEX IF NOT EXISTS review_by_status ON review_items(status, created_at)")


_V2_COLUMNS = [
    ("candidates", "TEXT NOT NULL DEFAULT '[]'"),
    ("passages", "TEXT NOT NULL DEFAULT '[]'"),
    ("guard_results", "TEXT NOT NULL DEFAULT '[]'"),
    ("reasons", "TEXT NOT NULL DEFAULT '[]'"),
    ("confidence", "DOUBLE PRECISION"),
    ("priority", "DOUBLE PRECISION NOT NULL DEFAULT 1"),
    ("deadline", "DOUBLE PRECISION NOT NULL DEFAULT 0"),
    ("assignee", "TEXT"),
    ("claim_expires_at", "DOUBLE PRECISION"),
    ("resolution", "TEXT"),
    ("edited_answer", "TEXT"),
    ("resolved_by", "TEXT"),
    ("resolved_at", "DOUBLE PRECISION"),
    ("index_name", "TEXT NOT NULL DEFAULT ''"),
    ("index_version", "TEXT NOT NULL DEFAULT ''"),
    ("request_id", "TEXT NOT NULL DEFAULT ''"),
    ("gold_id", "TEXT"),
]


def _v2_workflow(db: Database, cur: Cursor) -> None:
    serial = (
        "INTEGER PRIMARY KEY AUTOINCREMENT" if db.dialect == "sqlite" else "BIGSERIAL PRIMARY KEY"
    )
    for name, decl in _V2_COLUMNS:
        cur.execute(f"ALTER TABLE review_items ADD COLUMN {name} {decl}")
    cur.execute(
        f"""CREATE TABLE audit_log (
            id {serial},
            item_id TEXT NOT NULL,
            actor TEXT NOT NULL,
            action TEXT NOT NULL,
            at DOUBLE PRECISION NOT NULL,
            before_state TEXT,
            after_state TEXT
        )"""
    )
    cur.execute(
        """CREATE TABLE ratings (
            item_id TEXT NOT NULL REFERENCES review_items(id),
            reviewer TEXT NOT NULL,
            relevance INTEGER,
            fluency INTEGER,
            usefulness INTEGER,
            comment TEXT NOT NULL DEFAULT '',
            created_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (item_id, reviewer)
        )"""
    )
    cur.execute(
        """CREATE TABLE gold_items (
            id TEXT PRIMARY KEY,
            question TEXT NOT NULL,
            answer TEXT NOT NULL,
            is_correct INTEGER NOT NULL,
            passages TEXT NOT NULL DEFAULT '[]',
            created_at DOUBLE PRECISION NOT NULL
        )"""
    )
    cur.execute(
        """CREATE TABLE answer_cache (
            question_key TEXT NOT NULL,
            index_name TEXT NOT NULL,
            index_version TEXT NOT NULL,
            answer TEXT NOT NULL,
            review_id TEXT NOT NULL,
            reviewer TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (question_key, index_name, index_version)
        )"""
    )
    cur.execute("CREATE INDEX review_queue ON review_items(status, priority, created_at)")
    cur.execute("CREATE INDEX review_by_assignee ON review_items(assignee)")
    cur.execute("CREATE INDEX audit_by_item ON audit_log(item_id, id)")
    if db.dialect == "sqlite":  # the log is append-only, whoever holds the file
        for verb in ("UPDATE", "DELETE"):
            cur.execute(
                f"CREATE TRIGGER audit_log_no_{verb.lower()} BEFORE {verb} ON audit_log "
                "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END"
            )
    _fill_v2_columns(cur)


def _fill_v2_columns(cur: Cursor) -> None:
    """Move schema-1 payloads into their own columns; give old rows a deadline and a priority."""
    rows = cur.execute("SELECT id, created_at, payload FROM review_items").fetchall()
    for item_id, created_at, payload in rows:
        data = json.loads(payload or "{}")
        confidence = data.get("confidence")
        guard_results = data.get("guard_results", [])
        cur.execute(
            "UPDATE review_items SET passages = ?, guard_results = ?, reasons = ?, confidence = ?, "
            "priority = ?, deadline = ? WHERE id = ?",
            (
                json.dumps(data.get("passages", [])),
                json.dumps(guard_results),
                json.dumps(data.get("reasons", [])),
                confidence,
                priority_of(confidence, guard_results),
                created_at + DEFAULT_SLA_S,
                item_id,
            ),
        )
    if rows:
        logger.info("review store: %d schema-1 items migrated", len(rows))


def _v3_indexes(db: Database, cur: Cursor) -> None:
    """Indexes for the queries that scanned the whole queue: adding an item while gold items are
    mixed in (a join on ``gold_id``), export pages (keyset on ``created_at, id``) and the answer
    cache's pruning and invalidation of older index versions (by index and version)."""
    cur.execute("CREATE INDEX IF NOT EXISTS review_by_gold ON review_items(gold_id)")
    cur.execute("CREATE INDEX IF NOT EXISTS review_by_created ON review_items(created_at, id)")
    cur.execute(
        "CREATE INDEX IF NOT EXISTS review_by_index_version "
        "ON review_items(index_name, index_version, created_at)"
    )
    cur.execute(
        "CREATE INDEX IF NOT EXISTS answer_cache_by_index "
        "ON answer_cache(index_name, index_version)"
    )


def _v4_gold_from_items(db: Database, cur: Cursor) -> None:
    """Gold items made from resolved items keep what a reviewer sees of them: the sampled
    answers, the guard verdicts, the confidence and the reasons (empty for the others)."""
    for name, decl in (
        ("candidates", "TEXT NOT NULL DEFAULT '[]'"),
        ("guard_results", "TEXT NOT NULL DEFAULT '[]'"),
        ("confidence", "DOUBLE PRECISION"),
        ("reasons", "TEXT NOT NULL DEFAULT '[]'"),
        ("source_item_id", "TEXT"),
    ):
        cur.execute(f"ALTER TABLE gold_items ADD COLUMN {name} {decl}")


def _v5_escalations(db: Database, cur: Cursor) -> None:
    """Who escalated an item and to whom (NULL: the admins), so that the reviewer who escalated
    it cannot claim it back. An item escalated before schema 5 (its resolution still 'escalate')
    gets its escalator from ``resolved_by``, which escalating set, and its escalation goes to the
    admins; one that a claim and a release had turned back to 'pending' is 'escalated' again."""
    for name in ("escalated_by", "escalated_to"):
        cur.execute(f"ALTER TABLE review_items ADD COLUMN {name} TEXT")
    cur.execute(
        "UPDATE review_items SET escalated_by = resolved_by "
        "WHERE resolution = 'escalate' AND resolved_by IS NOT NULL"
    )
    cur.execute(
        "UPDATE review_items SET status = 'escalated' "
        "WHERE status = 'pending' AND escalated_by IS NOT NULL"
    )


MIGRATIONS: list[Migration] = [
    Migration(1, "review queue", _v1_queue),
    Migration(
        2,
        "workflow: claims, resolutions, ratings, audit log, gold items, answer cache",
        _v2_workflow,
    ),
    Migration(3, "indexes for gold items, export pages and answer-cache pruning", _v3_indexes),
    Migration(4, "gold items made from resolved items", _v4_gold_from_items),
    Migration(5, "escalations: who escalated an item and to whom", _v5_escalations),
]
SCHEMA_VERSION = MIGRATIONS[-1].version


MIGRATION_LOCK_ID = 0x72616767  # "ragg": one migrating server at a time on PostgreSQL


def current_version(db: Database, cur: Cursor) -> int:
    if db.table_exists(cur, "schema_version"):
        row = cur.execute("SELECT MAX(version) FROM schema_version").fetchone()
        return int(row[0]) if row and row[0] is not None else 0
    if db.table_exists(cur, "meta"):  # the first store kept its version here
        row = cur.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row[0]) if row else 0
    return 0


def migrate(db: Database) -> int:
    """Apply every migration the database lacks; returns the version it ends at. A database a
    newer ragguard has migrated is refused: this code's statements may not fit its tables."""
    with db.read() as cur:
        found = current_version(db, cur)
    if found > SCHEMA_VERSION:
        raise SchemaTooNewError(
            f"the review database is at schema {found}, newer than this ragguard's "
            f"{SCHEMA_VERSION}: upgrade ragguard (or point RAGGUARD_REVIEW_DB elsewhere)"
        )
    for migration in MIGRATIONS:
        with db.transaction() as cur:
            if db.dialect == "postgresql":  # SQLite's BEGIN IMMEDIATE already serialises this
                cur.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK_ID,))
            if current_version(db, cur) >= migration.version:
                continue  # checked inside the write transaction: two processes never both apply
            logger.info(
                "review store: migrating to schema %d (%s)",
                migration.version,
                migration.description,
            )
            if not db.table_exists(cur, "schema_version"):
                cur.execute(
                    "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, "
                    "description TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
                )
            migration.apply(db, cur)
            cur.execute(
                "INSERT INTO schema_version VALUES (?, ?, ?) ON CONFLICT (version) DO NOTHING",
                (migration.version, migration.description, time.time()),
            )
    return SCHEMA_VERSION
