"""The review store's Alembic history (``env.py`` and ``versions/``); see
``guards.review.migrations``."""
