"""Shared fixtures: the real models, loaded once per test session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def embedder():  # type: ignore[no-untyped-def]
    from rag.embed import Embedder

    return Embedder()


@pytest.fixture(scope="session")
def generator():  # type: ignore[no-untyped-def]
    from engine import EngineConfig
    from engine.hf_generator import HFGenerator

    return HFGenerator(EngineConfig(device="cpu", dtype="float32"))


@pytest.fixture
def settings(tmp_path: Path):  # type: ignore[no-untyped-def]
    from rag.settings import Settings

    return Settings(index_dir=tmp_path / "indexes", max_tokens=48, _env_file=None)


@pytest.fixture
def pipeline(settings, embedder, generator) -> Iterator[object]:  # type: ignore[no-untyped-def]
    from rag.pipeline import Pipeline

    pipe = Pipeline(settings, embedder, generator)
    yield pipe
    pipe.close()


@pytest.fixture
def demo_pipeline(pipeline):  # type: ignore[no-untyped-def]
    """A pipeline whose default index holds the packaged demo collection."""
    from rag.server.state import ensure_demo_index

    ensure_demo_index(pipeline)
    return pipeline
