"""keys: a name, a role and the SHA-256 of the key (the key itself is never stored)

``IF NOT EXISTS``: a key store from before Alembic already has this table.

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
    cursor(op).execute(
        "CREATE TABLE IF NOT EXISTS keys (name TEXT PRIMARY KEY, role TEXT NOT NULL, "
        "key_sha256 TEXT NOT NULL UNIQUE, created_at DOUBLE PRECISION NOT NULL)"
    )
