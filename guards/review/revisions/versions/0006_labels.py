"""labels, audit items, delivered answers, end-user feedback and calibration versions

Review items gain what the risk control needs: ``kind`` (``flagged`` by the policy, or
``audit``: an answer drawn at the audit rate whatever the policy decided), the ``propensity``
with which it was sent to a person, whether it was drawn ``uniform``-ly (independently of its
confidence: an audit draw, or any answer while nothing is answered automatically), the
confidence ``signals``, the ``shipped_confidence`` (before any per-collection calibration) and
the generator ``profile``. Every verdict on a non-gold item becomes a row of ``labels``; the
verdicts given before this revision are carried over with an empty profile (the generator
that wrote them is unknown, and their signals were not kept): kept for the record and exports,
never fitted, as no profile matches them. ``answers`` records each checked answer (for
feedback by its id), ``feedback`` the end users' thumbs, and ``calibrations`` /
``calibration_in_force`` the versions of each collection's calibration and the one in force
(swapped in by one update, so a crash between writing a version and swapping it in leaves the
old one in force).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from alembic import op

from guards.storage.schema_history import cursor

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

COLUMNS = [
    ("kind", "TEXT NOT NULL DEFAULT 'flagged'"),
    ("propensity", "DOUBLE PRECISION NOT NULL DEFAULT 1.0"),
    ("uniform", "INTEGER NOT NULL DEFAULT 0"),
    ("signals", "TEXT NOT NULL DEFAULT '{}'"),
    ("shipped_confidence", "DOUBLE PRECISION"),
    ("profile", "TEXT NOT NULL DEFAULT ''"),
]


def upgrade() -> None:
    cur = cursor(op)
    serial = (
        "INTEGER PRIMARY KEY AUTOINCREMENT" if cur.dialect == "sqlite" else "BIGSERIAL PRIMARY KEY"
    )
    for name, decl in COLUMNS:
        cur.execute(f"ALTER TABLE review_items ADD COLUMN {name} {decl}")
    cur.execute(
        f"""CREATE TABLE labels (
            id {serial},
            item_id TEXT UNIQUE,
            index_name TEXT NOT NULL,
            profile TEXT NOT NULL,
            kind TEXT NOT NULL,
            correct INTEGER NOT NULL,
            propensity DOUBLE PRECISION NOT NULL,
            uniform INTEGER NOT NULL,
            confidence DOUBLE PRECISION NOT NULL,
            signals TEXT NOT NULL,
            actor TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL
        )"""
    )
    cur.execute("CREATE INDEX labels_by_collection ON labels(index_name, profile, id)")
    cur.execute(
        "INSERT INTO labels (item_id, index_name, profile, kind, correct, propensity, uniform, "
        "confidence, signals, actor, created_at) "
        "SELECT id, index_name, profile, 'flagged', "
        "CASE WHEN status = 'approved' THEN 1 ELSE 0 END, 1.0, 0, confidence, '{}', "
        "resolved_by, resolved_at FROM review_items "
        "WHERE status IN ('approved', 'edited', 'rejected') AND gold_id IS NULL "
        "AND confidence IS NOT NULL AND index_name <> '' AND resolved_at IS NOT NULL "
        "ORDER BY resolved_at"
    )
    cur.execute(
        """CREATE TABLE answers (
            id TEXT PRIMARY KEY,
            index_name TEXT NOT NULL,
            profile TEXT NOT NULL,
            question TEXT NOT NULL,
            decision TEXT NOT NULL,
            confidence DOUBLE PRECISION,
            shipped_confidence DOUBLE PRECISION,
            signals TEXT NOT NULL,
            review_id TEXT,
            created_at DOUBLE PRECISION NOT NULL
        )"""
    )
    cur.execute(
        f"""CREATE TABLE feedback (
            id {serial},
            answer_id TEXT NOT NULL REFERENCES answers(id),
            index_name TEXT NOT NULL,
            profile TEXT NOT NULL,
            helpful INTEGER NOT NULL,
            comment TEXT NOT NULL,
            actor TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL
        )"""
    )
    cur.execute("CREATE INDEX feedback_by_collection ON feedback(index_name, profile)")
    cur.execute(
        """CREATE TABLE calibrations (
            index_name TEXT NOT NULL,
            profile TEXT NOT NULL,
            version INTEGER NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            labels INTEGER NOT NULL,
            accepted INTEGER NOT NULL,
            model TEXT NOT NULL,
            report TEXT NOT NULL,
            PRIMARY KEY (index_name, profile, version)
        )"""
    )
    cur.execute(
        """CREATE TABLE calibration_in_force (
            index_name TEXT NOT NULL,
            profile TEXT NOT NULL,
            version INTEGER NOT NULL,
            swapped_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (index_name, profile)
        )"""
    )
