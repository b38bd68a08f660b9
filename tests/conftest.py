"""Shared fixtures: the real models, loaded once per test session."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import pytest

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from engine import HFGenerator, LLMEngine
    from rag.pipeline import Pipeline
    from rag.retrieval.embed import Embedder
    from rag.settings import Settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Audit draws are random (5 % of answers by default): off unless a test sets a rate (and a seed),
# so that no other test finds an audit item it did not ask for in its queue.
os.environ.setdefault("RAGGUARD_AUDIT_RATE", "0")
# Likewise the answer cache (an hour by default): off unless a test turns it on, so that a test
# asking the same question twice gets two generations.
os.environ.setdefault("RAGGUARD_ANSWER_CACHE_TTL_S", "0")

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    from rag.retrieval.embed import Embedder

    return Embedder()


@pytest.fixture(scope="session")
def generator() -> HFGenerator:
    from engine import EngineConfig, HFGenerator

    return HFGenerator(EngineConfig(device="cpu", dtype="float32"))


@pytest.fixture(scope="session")
def llm_engine() -> LLMEngine:
    """Our engine on the default model: the pipeline's default generator."""
    from engine import EngineConfig, LLMEngine

    return LLMEngine(
        EngineConfig(device="cpu", dtype="float32", max_num_seqs=8, kv_cache_memory_bytes=128 << 20)
    )


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    from rag.settings import Settings

    return Settings(
        index_dir=tmp_path / "indexes", data_dir=tmp_path / "data", max_tokens=48, _env_file=None
    )


@pytest.fixture
def pipeline(settings: Settings, embedder: Embedder, llm_engine: LLMEngine) -> Iterator[Pipeline]:
    from rag.pipeline import Pipeline

    pipe = Pipeline(settings, embedder, llm_engine)
    yield pipe
    pipe.close()


def index_demo(root: Path, embedder: Embedder) -> Path:
    """The packaged demo collection indexed under ``root`` with ``embedder``; its folder."""
    from rag.demo import DEMO_INDEX, demo_collection_path
    from rag.retrieval.collection import CollectionRegistry
    from rag.retrieval.documents import load_path
    from rag.settings import Settings

    defaults = Settings(_env_file=None)
    registry = CollectionRegistry(
        root,
        embedder,
        chunk_size=defaults.retrieval.chunk_size,
        chunk_overlap=defaults.retrieval.chunk_overlap,
    )
    registry.get(DEMO_INDEX, create=True).ingest(load_path(demo_collection_path()))
    registry.close()
    return root / DEMO_INDEX


@pytest.fixture(scope="session")
def demo_index_template(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Path:
    """The packaged demo collection, indexed once per session; tests get a copy."""
    return index_demo(tmp_path_factory.mktemp("demo-template"), embedder)


@pytest.fixture
def demo_pipeline(pipeline: Pipeline, demo_index_template: Path) -> Pipeline:
    """A pipeline whose default index is a fresh copy of the demo collection."""
    shutil.copytree(demo_index_template, pipeline.settings.retrieval.index_dir / "demo")
    return pipeline


@pytest.fixture(scope="session")
def fake_demo_index_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo collection indexed with the hashing embedder (real FAISS), once per session."""
    from tests.fakes import HashingEmbedder

    return index_demo(tmp_path_factory.mktemp("fake-demo-template"), HashingEmbedder())


@pytest.fixture
def fake_pipeline(settings: Settings, fake_demo_index_template: Path) -> Iterator[Pipeline]:
    """A pipeline over a copy of the demo collection with both models replaced by the fakes of
    ``tests.fakes``: real FAISS, SQLite, guards and policy, no model loaded."""
    from rag.pipeline import Pipeline
    from tests.fakes import HashingEmbedder, ScriptedGenerator

    shutil.copytree(fake_demo_index_template, settings.retrieval.index_dir / "demo")
    pipe = Pipeline(settings, HashingEmbedder(), ScriptedGenerator())
    yield pipe
    pipe.close()


@pytest.fixture
def live_server() -> Iterator[Callable[[ASGIApp], str]]:
    """``live_server(app)``: serve the ASGI app with uvicorn on a free loopback port in a thread
    (real sockets: clients can stream and hang up); its base URL. Stopped after the test."""
    import socket
    import threading
    import time

    import uvicorn

    running: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(app: ASGIApp) -> str:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        running.append((server, thread))
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        return f"http://127.0.0.1:{port}"

    yield start
    for server, thread in running:
        server.should_exit = True
        thread.join(timeout=15)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL server for the session (``tests.postgres``); skips without one."""
    from tests.postgres import postgres_server

    yield from postgres_server()


MODEL_FIXTURES = frozenset(
    {"embedder", "generator", "llm_engine", "pipeline", "demo_pipeline", "demo_index_template"}
)
"""Fixtures that load a real model: a test using one is marked ``model`` automatically."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark tests that use a real model's fixture ``model``; skip tests marked ``gpu`` on
    machines without CUDA."""
    import torch

    for item in items:
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.model)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _real_models_only_when_marked(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test not marked ``model`` (or ``slow``) must not load a real model: the fast tier
    (``make test-fast``) stays fast, and the marks stay true. Use ``tests.fakes`` instead."""
    if "model" in request.keywords or "slow" in request.keywords:
        return
    from engine import HFGenerator, LLMEngine
    from rag.retrieval.embed import Embedder

    def refuse(self: object, *args: object, **kwargs: object) -> NoReturn:
        raise AssertionError(
            f"{request.node.nodeid} loads a real model ({type(self).__name__}) but is not "
            "marked model: mark it, or use the fakes of tests/fakes.py"
        )

    for cls in (Embedder, LLMEngine, HFGenerator):
        monkeypatch.setattr(cls, "__init__", refuse)
