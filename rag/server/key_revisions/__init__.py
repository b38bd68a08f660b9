"""The API key store's Alembic history (``env.py`` and ``versions/``); see
``rag.server.auth.KEYS_HISTORY``."""
