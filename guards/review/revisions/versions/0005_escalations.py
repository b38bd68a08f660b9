"""escalations: who escalated an item and to whom

NULL ``escalated_to``: the admins. The reviewer who escalated an item cannot claim it back. An
item escalated before this revision (its resolution still 'escalate') gets its escalator from
``resolved_by``, which escalating set, and its escalation goes to the admins; one that a claim and
a release had turned back to 'pending' is 'escalated' again.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from alembic import op

from guards.storage.schema_history import cursor

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    cur = cursor(op)
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
