"""The stores' database layer, shared by the review store (``guards.review``) and the server's
API-key store (``rag.server.auth``): pooled SQLAlchemy Core engines for SQLite or PostgreSQL
running the same ``?`` SQL (``database``), and a store's schema as an Alembic history upgraded on
start (``schema_history``).

It sits at the bottom of ``guards``: it imports nothing else of ragguard and knows no store's
tables; each store keeps its own revisions (``guards/review/revisions``,
``rag/server/key_revisions``).
"""
