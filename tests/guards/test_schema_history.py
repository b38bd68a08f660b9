"""The stores' schemas as Alembic histories: upgraded on start, a newer schema refused, a failed
upgrade rolled back whole, two servers starting at once, and Alembic's own command line."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from guards.review import NewItem, ReviewStore
from guards.review.errors import SchemaTooNewError
from guards.review.migrations import HISTORY, SCHEMA_VERSION, migrate
from guards.storage.database import Database
from rag.errors import ConfigurationError
from rag.server.auth import KEYS_HISTORY, KeyStore, Role


def _rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _columns(path: Path, table: str) -> set[str]:
    return {str(row[1]) for row in _rows(path, f"PRAGMA table_info({table})")}


def test_the_histories_end_at_this_codes_schema() -> None:
    assert HISTORY.head() == f"{SCHEMA_VERSION:04d}"
    assert KEYS_HISTORY.head() == "0001"


def test_a_new_database_is_upgraded_to_head_and_recorded_for_older_ragguards(
    tmp_path: Path,
) -> None:
    path = tmp_path / "r.sqlite"
    store = ReviewStore(path)
    assert store.schema_version == SCHEMA_VERSION
    store.close()
    assert _rows(path, "SELECT version_num FROM ragguard_review_revision") == [
        (f"{SCHEMA_VERSION:04d}",)
    ]
    # A ragguard from before Alembic reads schema_version: it must see where the database is.
    assert _rows(path, "SELECT MAX(version) FROM schema_version") == [(SCHEMA_VERSION,)]
    assert {"escalated_by", "escalated_to", "gold_id"} <= _columns(path, "review_items")


def test_a_database_at_an_unknown_revision_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    ReviewStore(path).close()
    keys = tmp_path / "keys.sqlite"
    KeyStore(keys)
    for file, table in ((path, "ragguard_review_revision"), (keys, "ragguard_keys_revision")):
        conn = sqlite3.connect(file)
        conn.execute(f"UPDATE {table} SET version_num = '0099'")
        conn.commit()
        conn.close()
    with pytest.raises(
        SchemaTooNewError, match=f"schema 0099, newer than this ragguard's {SCHEMA_VERSION}"
    ):
        ReviewStore(path)
    with pytest.raises(ConfigurationError, match="revision 0099, newer than this ragguard's"):
        KeyStore(keys)


def test_a_failed_revision_leaves_the_database_where_it_was(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    db = Database(path)
    assert migrate(db, to=4) == 4
    with db.transaction() as cur:
        cur.execute(
            "INSERT INTO review_items (id, created_at, question, answer, payload) "
            "VALUES ('kept', 1.0, 'q?', 'a.', '{}')"
        )
        # Revision 0005 adds escalated_by, then escalated_to: the second one now fails.
        cur.execute("ALTER TABLE review_items ADD COLUMN escalated_to TEXT")
    with pytest.raises(Exception, match="duplicate column"):
        migrate(db)
    db.close()
    assert _rows(path, "SELECT version_num FROM ragguard_review_revision") == [("0004",)]
    assert "escalated_by" not in _columns(path, "review_items")  # its first statement undone
    assert _rows(path, "SELECT id FROM review_items") == [("kept",)]


def test_servers_starting_together_apply_each_revision_once(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    start = threading.Barrier(4)
    versions: list[int] = []
    errors: list[BaseException] = []

    def open_store() -> None:
        try:
            start.wait()
            store = ReviewStore(path)
            versions.append(store.schema_version)
            store.add(NewItem("q?", "a."))
            store.close()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and versions == [SCHEMA_VERSION] * 4
    assert _rows(path, "SELECT COUNT(*) FROM review_items") == [(4,)]


def test_alembics_command_line_upgrades_a_database_the_store_then_opens(tmp_path: Path) -> None:
    config = tmp_path / "alembic.ini"
    config.write_text("[alembic]\nscript_location = guards.review:revisions\n")
    path = tmp_path / "r.sqlite"

    def alembic(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "alembic", "-c", str(config), "-x", f"url={path}", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout + done.stderr

    alembic("upgrade", "0003")
    assert _rows(path, "SELECT version_num FROM ragguard_review_revision") == [("0003",)]
    assert "0003" in alembic("current")
    store = ReviewStore(path)  # the rest on start
    assert store.schema_version == SCHEMA_VERSION
    store.close()
    assert f"{SCHEMA_VERSION:04d} (head)" in alembic("current")


def test_a_key_store_from_before_alembic_keeps_its_keys(tmp_path: Path) -> None:
    path = tmp_path / "keys.sqlite"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE keys (name TEXT PRIMARY KEY, role TEXT NOT NULL, "
        "key_sha256 TEXT NOT NULL UNIQUE, created_at DOUBLE PRECISION NOT NULL)"
    )
    conn.execute("INSERT INTO keys VALUES ('ci', 'app', 'abc', 1.0)")
    conn.commit()
    conn.close()
    store = KeyStore(path)
    assert [(k.name, k.role) for k in store.list_keys()] == [("ci", Role.APP)]
    assert _rows(path, "SELECT version_num FROM ragguard_keys_revision") == [("0001",)]
