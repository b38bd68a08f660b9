"""review queue (the first store's schema; it kept its version in ``meta``)

Revision ID: 0001
Revises:
"""

from __future__ import annotations

from alembic import op

from guards.storage.schema_history import cursor

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    cur = cursor(op)
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
