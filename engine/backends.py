"""The backend registry: builds an ``EngineClient`` by name.

It sits above the backends: each built-in backend's module defines its own factory,
``build_client(config, options)``, and the registry names the module, imported only when that
backend is built (so torch, transformers or httpx load only for the backend in use). Another
backend is added with ``register_backend``; the seam (``engine.client``) never changes for one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import cast

from engine.client import EngineClient
from engine.config import EngineConfig
from engine.errors import EngineUnavailableError
from engine.generator import Generator

BackendFactory = Callable[[EngineConfig, object | None], EngineClient]
"""``(config, options) -> client``: ``options`` is the backend's own configuration, if it has one
(the ``openai`` backend's ``RemoteConfig``); the others take None."""

_BUILT_IN: dict[str, str] = {
    "engine": "engine.async_engine",
    "engine-process": "engine.process_client",
    "hf": "engine.hf_generator",
    "openai": "engine.remote",
}
"""Built-in backends and the module whose ``build_client`` builds each."""

_REGISTERED: dict[str, BackendFactory] = {}


def register_backend(name: str, factory: BackendFactory) -> None:
    """Make ``factory`` buildable by name (a built-in or earlier one of that name is replaced)."""
    _REGISTERED[name] = factory


def backends() -> tuple[str, ...]:
    return tuple(dict.fromkeys([*_BUILT_IN, *_REGISTERED]))


def _factory(backend: str) -> BackendFactory:
    if backend in _REGISTERED:
        return _REGISTERED[backend]
    if backend in _BUILT_IN:
        module = importlib.import_module(_BUILT_IN[backend])
        return cast("BackendFactory", module.build_client)
    raise ValueError(f"unknown generator backend {backend!r}; choose one of {backends()}")


def build_engine_client(
    config: EngineConfig, backend: str = "engine", options: object | None = None
) -> EngineClient:
    """Load the model named by ``config`` behind the backend registered as ``backend``:
    ``engine`` (ours: paged KV, continuous batching, stepped by a thread of this process),
    ``engine-process`` (the same engine in a child process, so that its steps never hold this
    process's interpreter lock), ``hf`` (``transformers.generate``, the baseline and the
    fallback for architectures the engine does not implement) or ``openai`` (a remote
    OpenAI-compatible server; ``options`` is its ``engine.remote.RemoteConfig``)."""
    return _factory(backend)(config, options)


def as_engine_client(generator: EngineClient | Generator) -> tuple[EngineClient, bool]:
    """``generator`` behind the client interface, and whether a wrapper was made for it (the
    caller then owns the wrapper and shuts it down; the generator itself stays usable)."""
    try:
        is_client = isinstance(generator, EngineClient)
    except EngineUnavailableError:
        # The protocol check reads the properties: a remote client whose server is still
        # starting cannot tell its model name yet, and only a client would say so.
        is_client = True
    if is_client:
        return cast("EngineClient", generator), False
    from engine.llm_engine import LLMEngine

    if isinstance(generator, LLMEngine):
        from engine.async_engine import AsyncEngine

        return AsyncEngine(generator), True
    from engine.threaded_client import ThreadedClient

    return ThreadedClient(cast("Generator", generator)), True
