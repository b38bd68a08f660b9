"""The server's state (``app.state.ragguard``, a ``ServerState``) reached from a test client, typed:
``TestClient.app`` is declared a bare ASGI callable, so mypy cannot see the app's ``state``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

    from guards.review import ReviewStore
    from rag.server.auth import KeyStore
    from rag.server.state import ServerState


def server_state(client: TestClient) -> ServerState:
    """The state of the app ``client`` drives (a FastAPI app from ``rag.server.create_app``)."""
    app = client.app
    assert isinstance(app, FastAPI), f"not a ragguard app: {app!r}"
    state: ServerState = app.state.ragguard
    return state


def review_store(client: TestClient) -> ReviewStore:
    """The app's review store (opened by the lifespan: use the client as a context manager)."""
    store = server_state(client).reviews
    assert store is not None, "no review store: is the client's lifespan running?"
    return store


def key_store(client: TestClient) -> KeyStore:
    """The app's API-key store (opened by the lifespan)."""
    keys = server_state(client).keys
    assert keys is not None, "no key store: is the client's lifespan running?"
    return keys
