"""The Python SDK: ``Client`` and ``AsyncClient`` (``rag.client.sdk``) over the HTTP API; the
requests they send and how responses, server-sent events and errors are read back are in
``rag.client.http``."""

from rag.client.sdk import DEFAULT_TIMEOUT_S, AsyncClient, Client, ServerError

__all__ = ["DEFAULT_TIMEOUT_S", "AsyncClient", "Client", "ServerError"]
