"""Alembic's environment for the API key store's history.

``ragguard`` runs it on start with a connection already inside its write transaction
(``config.attributes["connection"]``). Run by Alembic's command line instead, it connects to
``-x url=...`` (a path or a database URL, as ``RAGGUARD_KEYS_DB`` takes) itself.
"""

from __future__ import annotations

from alembic import context

from guards.storage.schema_history import run_environment
from rag.server.auth import KEYS_HISTORY

run_environment(context, KEYS_HISTORY)
