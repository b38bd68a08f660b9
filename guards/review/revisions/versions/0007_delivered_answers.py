"""delivered answers: the TTL cache of answers that went out unreviewed, and withdrawn answers

``delivered_answers`` holds one answer per key (the index, its content version, the normalised
question and a fingerprint of the settings and options that shaped the answer), with the time it
expires. ``withdrawn_answers`` remembers the answers a reviewer rejected or edited (by question,
index and a hash of the answer's text), so that the cache never takes that answer again.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from alembic import op

from guards.storage.schema_history import cursor

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    cur = cursor(op)
    cur.execute(
        """CREATE TABLE delivered_answers (
            cache_key TEXT PRIMARY KEY,
            index_name TEXT NOT NULL,
            index_version TEXT NOT NULL,
            question_key TEXT NOT NULL,
            answer_id TEXT NOT NULL,
            answer_hash TEXT NOT NULL,
            result TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL
        )"""
    )
    cur.execute("CREATE INDEX delivered_by_question ON delivered_answers(index_name, question_key)")
    cur.execute(
        """CREATE TABLE withdrawn_answers (
            index_name TEXT NOT NULL,
            question_key TEXT NOT NULL,
            answer_hash TEXT NOT NULL,
            item_id TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (index_name, question_key, answer_hash)
        )"""
    )
