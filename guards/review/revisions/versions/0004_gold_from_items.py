"""gold items made from resolved items

They keep what a reviewer sees of them: the sampled answers, the guard verdicts, the confidence
and the reasons (empty for the others).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from alembic import op

from guards.storage.schema_history import cursor

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    cur = cursor(op)
    for name, decl in (
        ("candidates", "TEXT NOT NULL DEFAULT '[]'"),
        ("guard_results", "TEXT NOT NULL DEFAULT '[]'"),
        ("confidence", "DOUBLE PRECISION"),
        ("reasons", "TEXT NOT NULL DEFAULT '[]'"),
        ("source_item_id", "TEXT"),
    ):
        cur.execute(f"ALTER TABLE gold_items ADD COLUMN {name} {decl}")
