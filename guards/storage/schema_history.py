"""A store's schema as an Alembic history: versioned revisions, upgraded on start, a newer schema
refused.

Each store keeps its revisions in a package of its own (``guards.review.revisions`` for the review
queue, ``rag.server.key_revisions`` for the API keys) and records where a database stands in a
version table of its own, so both stores can live in one PostgreSQL database. ``upgrade`` runs
every missing revision inside one write transaction of ``Database``: SQLite's ``BEGIN IMMEDIATE``
or a PostgreSQL advisory lock makes two starting servers take turns, and a crash mid-upgrade
leaves the database at the revision it started from (both dialects' DDL is transactional).

The same folders work with Alembic's own command line (``alembic -x url=... upgrade head`` with a
``script_location`` pointing at the package), for operators who migrate before they deploy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from guards.storage.database import Cursor, Database

logger = logging.getLogger(__name__)


class UnknownRevisionError(RuntimeError):
    """The database records a revision this code's history does not contain (a newer ragguard
    migrated it)."""

    def __init__(self, found: str, head: str):
        super().__init__(f"revision {found!r} is not in this ragguard's history (head {head!r})")
        self.found = found
        self.head = head


@dataclass(frozen=True, slots=True)
class SchemaHistory:
    """Where one store's revisions live and where a database records its revision."""

    script_location: str
    """Alembic's ``package:folder`` holding ``env.py`` and ``versions/``."""
    version_table: str
    lock_id: int
    """PostgreSQL advisory lock taken while upgrading: one migrating server at a time."""

    def config(self) -> Config:
        cfg = Config()
        cfg.set_main_option("script_location", self.script_location)
        cfg.set_main_option("version_table", self.version_table)
        return cfg

    def script(self) -> ScriptDirectory:
        return ScriptDirectory.from_config(self.config())

    def head(self) -> str:
        head = self.script().get_current_head()
        assert head is not None, f"{self.script_location} has no revisions"
        return head

    def current(self, cur: Cursor) -> str | None:
        """The revision the database records (None: not under this history yet)."""
        context = MigrationContext.configure(
            cur.connection, opts={"version_table": self.version_table}
        )
        return context.get_current_revision()


def upgrade(
    db: Database,
    history: SchemaHistory,
    *,
    target: str = "head",
    before: Callable[[Cursor, str | None], str | None] | None = None,
    after: Callable[[Cursor, str], None] | None = None,
) -> str:
    """Bring ``db`` to ``target`` (a revision id or ``head``); returns the revision it ends at.

    ``before(cur, current)`` runs first inside the same transaction and may return a revision to
    stamp without running it (a database an older, pre-Alembic ragguard made); ``after(cur,
    revision)`` runs last, in it too, even when nothing was to do. Raises
    ``UnknownRevisionError`` if the database records a revision this history lacks.
    """
    script = history.script()
    with db.transaction() as cur:
        if db.dialect == "postgresql":  # SQLite's BEGIN IMMEDIATE already serialises this
            cur.execute("SELECT pg_advisory_xact_lock(?)", (history.lock_id,))
        current = history.current(cur)
        if current is not None and current not in _revisions(script):
            raise UnknownRevisionError(current, history.head())
        cfg = history.config()
        cfg.attributes["connection"] = cur.connection
        if before is not None and (stamp := before(cur, current)) is not None:
            command.stamp(cfg, stamp)
            current = stamp
        if current != target and not (target == "head" and current == script.get_current_head()):
            logger.info(
                "%s: upgrading from %s to %s", history.version_table, current or "nothing", target
            )
            command.upgrade(cfg, target)
            current = history.current(cur)
        assert current is not None
        if after is not None:
            after(cur, current)
    return current


def _revisions(script: ScriptDirectory) -> set[str]:
    return {revision.revision for revision in script.walk_revisions()}


def cursor(op: Any) -> Cursor:
    """A revision's ``Cursor`` over Alembic's connection: the same ``?`` SQL the stores run."""
    return Cursor(op.get_bind())


def run_environment(context: Any, history: SchemaHistory) -> None:
    """The body of a history's ``env.py``: run the revisions Alembic picked, on ragguard's
    connection (``upgrade``) or, from Alembic's command line, on ``-x url=...``."""
    connection = context.config.attributes.get("connection")
    if connection is not None:  # inside upgrade(): its transaction and lock are held
        context.configure(connection=connection, version_table=history.version_table)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = context.get_x_argument(as_dictionary=True).get("url")
    if not url:
        raise SystemExit("name the database: alembic -x url=PATH_OR_DATABASE_URL upgrade head")
    db = Database(url)
    try:
        with db.transaction() as cur:
            if db.dialect == "postgresql":
                cur.execute("SELECT pg_advisory_xact_lock(?)", (history.lock_id,))
            context.configure(connection=cur.connection, version_table=history.version_table)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        db.close()
