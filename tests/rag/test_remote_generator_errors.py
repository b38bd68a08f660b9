"""The remote generator's failures as ragguard sees them: its settings, and a remote that keeps
answering 429 reaching our callers as a 429 with ``Retry-After`` through every route."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest
from fastapi.testclient import TestClient

from engine import RemoteClient, RemoteConfig
from rag.pipeline import Pipeline
from rag.server import create_app
from rag.settings import Settings
from tests.fakes import HashingEmbedder
from tests.scripted_openai import Script, scripted_app

if TYPE_CHECKING:
    from starlette.types import ASGIApp


@pytest.fixture
def remote(live_server: Callable[[ASGIApp], str]) -> tuple[Script, str]:
    script = Script()
    return script, live_server(scripted_app(script)) + "/v1"


def test_settings_need_a_url_for_the_openai_generator() -> None:
    with pytest.raises(ValueError, match="generator_url"):
        Settings(generator="openai", _env_file=None)
    settings = Settings(
        generator="openai",
        generator_url="http://h:8000/v1",
        generator_api_key="sk-1",
        _env_file=None,
    )
    remote = settings.engine.remote_config()
    assert remote is not None and remote.api_key == "sk-1" and remote.base_url == "http://h:8000/v1"
    assert "sk-1" not in repr(settings)


def test_a_busy_remote_is_a_429_with_retry_after_on_every_route(
    remote: tuple[Script, str], settings: Any, fake_demo_index_template: Any
) -> None:
    """The remote generator's 429s, once its retries are spent, reach the caller as our 429 with
    ``Retry-After``: through the pipeline (``/v1/ask``) and through the raw OpenAI route, which
    talks to the engine client directly (it answered 500 before)."""
    script, url = remote
    shutil.copytree(fake_demo_index_template, settings.retrieval.index_dir / "demo")
    engine = RemoteClient(RemoteConfig(url, backoff_s=0.0, max_retries=0), max_model_len=None)
    pipeline = Pipeline(settings, HashingEmbedder(), engine)
    with TestClient(create_app(pipeline=pipeline)) as http:
        for path, body in (
            ("/v1/ask", {"question": "What is a KV cache?"}),
            ("/v1/completions", {"model": "scripted", "prompt": "Paris is", "max_tokens": 4}),
        ):
            script.failures = [(429, {"retry-after": "2.5"})]
            response = http.post(path, json=body)
            assert response.status_code == 429, (path, response.text)
            assert response.headers["retry-after"] == "3", path  # whole seconds, rounded up
    pipeline.close()
