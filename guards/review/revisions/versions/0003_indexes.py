"""indexes for gold items, export pages and answer-cache pruning

Indexes for the queries that scanned the whole queue: adding an item while gold items are mixed
in (a join on ``gold_id``), export pages (keyset on ``created_at, id``) and the answer cache's
pruning and invalidation of older index versions (by index and version).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op

from guards.storage.schema_history import cursor

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    cur = cursor(op)
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
