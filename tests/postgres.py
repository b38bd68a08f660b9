"""A throwaway PostgreSQL server for the tests (initdb + pg_ctl on a Unix socket), when the
PostgreSQL binaries and psycopg are installed; the tests that need it skip otherwise."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


def _as_server_user(*cmd: str) -> list[str]:
    # PostgreSQL refuses to run as root.
    return ["runuser", "-u", "nobody", "--", *cmd] if os.geteuid() == 0 else list(cmd)


def _run(*cmd: str) -> None:
    subprocess.run(_as_server_user(*cmd), capture_output=True, check=True, timeout=60)


def postgres_server() -> Iterator[str]:
    """Start a server; yield the URL of its ``postgres`` database; stop and remove it."""
    pytest.importorskip("psycopg", reason="psycopg is not installed: pip install 'psycopg[binary]'")
    if not (shutil.which("initdb") and shutil.which("pg_ctl")):
        pytest.skip("PostgreSQL binaries (initdb, pg_ctl) are not installed")
    # Under /tmp itself: the server's user must be able to reach its directory.
    root = Path(tempfile.mkdtemp(prefix="ragguard-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "nobody")
    data, port = root / "data", 50000 + uuid.uuid4().int % 10000
    options = f"-k {root} -c listen_addresses='' -p {port}"
    try:
        _run("initdb", "-D", str(data), "-A", "trust", "-U", "postgres")
        _run("pg_ctl", "-D", str(data), "-l", str(root / "log"), "-w", "start", "-o", options)
    except (subprocess.CalledProcessError, OSError) as exc:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"a throwaway PostgreSQL server did not start: {exc}")
    yield f"postgresql://postgres@/postgres?host={root}&port={port}"
    _run("pg_ctl", "-D", str(data), "-m", "immediate", "stop")
    shutil.rmtree(root, ignore_errors=True)


def new_database(url: str) -> str:
    """The URL of a new, empty database on the server of ``url`` (a ``postgres_server`` URL)."""
    import psycopg

    name = f"ragguard_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return url.replace("postgresql://postgres@/postgres?", f"postgresql://postgres@/{name}?")
