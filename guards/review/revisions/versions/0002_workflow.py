"""workflow: claims, resolutions, ratings, audit log, gold items, answer cache

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import json
import logging

from alembic import op

from guards.review.models import priority_of
from guards.storage.database import Cursor
from guards.storage.schema_history import cursor

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

logger = logging.getLogger(__name__)

SLA_S = 24 * 3600.0
"""Deadline given to rows that predate deadlines (the default SLA when this revision was made)."""

COLUMNS = [
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


def upgrade() -> None:
    cur = cursor(op)
    serial = (
        "INTEGER PRIMARY KEY AUTOINCREMENT" if cur.dialect == "sqlite" else "BIGSERIAL PRIMARY KEY"
    )
    for name, decl in COLUMNS:
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
    if cur.dialect == "sqlite":  # the log is append-only, whoever holds the file
        for verb in ("UPDATE", "DELETE"):
            cur.execute(
                f"CREATE TRIGGER audit_log_no_{verb.lower()} BEFORE {verb} ON audit_log "
                "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END"
            )
    _fill_columns(cur)


def _fill_columns(cur: Cursor) -> None:
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
                created_at + SLA_S,
                item_id,
            ),
        )
    if rows:
        logger.info("review store: %d schema-1 items migrated", len(rows))
