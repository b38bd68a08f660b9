"""Two servers started together, as containers are: ragguard (B, ``RAGGUARD_GENERATOR=openai``)
comes up before its generator (A, a real process that loads for a while, answering 503). B
serves its other routes meanwhile, says on ``/readyz`` what it waits for, answers questions with
503 ``engine_starting`` and ``Retry-After``, serves as soon as A is up, and reconnects by itself
after A is killed and started again."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from rag.server import create_app
from rag.settings import Settings
from tests.scripted_openai import ScriptedProcess, wait_for

if TYPE_CHECKING:
    from starlette.types import ASGIApp

pytestmark = pytest.mark.model  # B loads the real embedder

QUESTION = {"question": "What does a KV cache avoid recomputing?", "max_tokens": 8}


def _ready(http: httpx.Client) -> dict[str, Any]:
    response = http.get("/readyz")
    body: dict[str, Any] = response.json()
    assert (response.status_code == 200) == (body["status"] == "ready"), body
    return body


@pytest.fixture
def generator() -> Iterator[ScriptedProcess]:
    served = ScriptedProcess()
    yield served
    served.kill()


def test_b_waits_for_a_then_serves_and_reconnects_after_a_restart(
    generator: ScriptedProcess,
    live_server: Callable[[ASGIApp], str],
    tmp_path: Path,
    demo_index_template: Path,
) -> None:
    shutil.copytree(demo_index_template, tmp_path / "indexes" / "demo")
    settings = Settings(
        index_dir=tmp_path / "indexes",
        data_dir=tmp_path / "data",
        generator="openai",
        generator_url=generator.url,
        generator_max_retries=0,
        _env_file=None,
    )
    b = httpx.Client(base_url=live_server(create_app(settings)), timeout=60)

    # A is not there yet: B loads everything else and waits for it.
    wait_for(lambda: _ready(b)["status"] != "loading", timeout_s=120)
    waiting = _ready(b)
    assert waiting["status"] == "waiting", waiting
    assert generator.url in waiting["error"] and "still starting" in waiting["error"]
    assert b.get("/healthz").status_code == 200
    assert b.get("/v1/reviews").status_code == 200  # reviewers work meanwhile
    refused = b.post("/v1/ask", json=QUESTION)
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"] == "engine_starting"
    assert int(refused.headers["retry-after"]) >= 1
    openai = b.post("/v1/completions", json={"model": "x", "prompt": "Hi", "max_tokens": 2})
    assert openai.status_code == 503 and "retry-after" in openai.headers, openai.text

    generator.start(loading_s=2.0)  # it starts, then loads for two seconds
    wait_for(lambda: _ready(b)["status"] == "ready", timeout_s=120)
    assert _ready(b)["model"] == "scripted"
    answered = b.post("/v1/ask", json=QUESTION)
    assert answered.status_code == 200, answered.text
    body = answered.json()  # the scripted answer cites nothing, so B may well decline it
    assert body["model"] == "scripted" and body["usage"]["completion_tokens"] > 0, body

    generator.kill()  # kill -9 under B
    down = b.post("/v1/ask", json=QUESTION)
    assert down.status_code == 503, down.text
    wait_for(lambda: _ready(b)["status"] == "waiting", timeout_s=120)
    assert "unreachable" in _ready(b)["error"]

    generator.start()
    wait_for(lambda: _ready(b)["status"] == "ready", timeout_s=120)
    again = b.post("/v1/ask", json=QUESTION)
    assert again.status_code == 200, again.text
