"""Alembic's environment for the review store's history.

``ragguard`` runs it on start with a connection already inside its write transaction
(``config.attributes["connection"]``). Run by Alembic's command line instead, it connects to
``-x url=...`` (a path or a database URL, as ``RAGGUARD_REVIEW_DB`` takes) itself.
"""

from __future__ import annotations

from alembic import context

from guards.review.migrations import HISTORY
from guards.storage.schema_history import run_environment

run_environment(context, HISTORY)
