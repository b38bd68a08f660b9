"""The REST API (FastAPI)."""

from rag.server.app import create_app

__all__ = ["create_app"]
