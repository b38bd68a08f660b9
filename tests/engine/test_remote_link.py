"""A remote generator that is still starting, or goes down and comes back: the client waits with
backoff up to a deadline, says what it waits for, and reconnects by itself. Against the scripted
OpenAI server, in a thread, and as a real process that is started late, killed and restarted."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from engine import (
    EngineStartingError,
    EngineUnavailableError,
    RemoteClient,
    RemoteConfig,
    SamplingParams,
    generate_all,
)
from engine.remote_link import LinkState
from tests.scripted_openai import Script, ScriptedProcess, free_port, scripted_app, wait_for

if TYPE_CHECKING:
    from starlette.types import ASGIApp

PARAMS = SamplingParams(max_tokens=5)


@pytest.fixture
def remote(live_server: Callable[[ASGIApp], str]) -> tuple[Script, str]:
    script = Script()
    return script, live_server(scripted_app(script)) + "/v1"


def _healthy(engine: RemoteClient) -> bool:
    try:
        engine.check_health()
    except EngineStartingError:
        return False
    return True


def _answer(engine: RemoteClient) -> str:
    return str(asyncio.run(generate_all(engine, "Where is Paris?", PARAMS)).outputs[0].text)


def test_the_constructor_waits_for_a_server_still_loading(remote: tuple[Script, str]) -> None:
    script, url = remote
    script.models_unavailable = 3  # three 503s from the model list, as a server loading
    engine = RemoteClient(RemoteConfig(url, backoff_s=0.0), max_model_len=None)
    assert script.model_lists == 4
    assert (engine.model_name, engine.max_model_len) == ("scripted", 512)
    assert engine.link_state is LinkState.UP
    assert _answer(engine) == "Paris is the capital."
    engine.shutdown()


def test_in_the_background_it_says_what_it_waits_for_then_serves(
    remote: tuple[Script, str],
) -> None:
    script, url = remote
    script.models_unavailable = 10**6
    config = RemoteConfig(url, backoff_s=0.0, connect_in_background=True)
    engine = RemoteClient(config, max_model_len=None)  # returns at once
    wait_for(lambda: script.model_lists >= 2)
    with pytest.raises(EngineStartingError, match=r"waiting for .*still starting.*503"):
        engine.check_health()
    with pytest.raises(EngineStartingError):
        _ = engine.model_name  # the card is not known yet
    with pytest.raises(EngineStartingError):
        _answer(engine)
    assert script.bodies == []  # nothing was sent to a server that is not up
    script.models_unavailable = 0  # it has loaded
    wait_for(lambda: _healthy(engine))
    assert engine.model_name == "scripted" and _answer(engine) == "Paris is the capital."
    engine.shutdown()


def test_a_server_that_does_not_come_up_in_time_fails_for_good() -> None:
    config = RemoteConfig(f"http://127.0.0.1:{free_port()}/v1", startup_timeout_s=0.3)
    started = time.monotonic()
    with pytest.raises(EngineUnavailableError, match=r"did not come up within 0.3 s") as failed:
        RemoteClient(config, max_model_len=None)
    assert not isinstance(failed.value, EngineStartingError)
    assert time.monotonic() - started < 10


def test_a_refused_key_fails_at_once(live_server: Callable[[ASGIApp], str]) -> None:
    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        return JSONResponse({"error": {"message": "bad key"}}, status_code=401)

    started = time.monotonic()
    with pytest.raises(EngineUnavailableError, match="401") as failed:
        RemoteClient(RemoteConfig(live_server(app) + "/v1", api_key="sk-x"), max_model_len=None)
    assert not isinstance(failed.value, EngineStartingError)
    assert time.monotonic() - started < 10  # not the ten-minute startup deadline


@pytest.fixture
def scripted_process() -> Iterator[ScriptedProcess]:
    served = ScriptedProcess()
    yield served
    served.kill()


def test_started_before_the_server_then_reconnects_after_a_kill(
    scripted_process: ScriptedProcess,
) -> None:
    url = f"http://127.0.0.1:{scripted_process.port}/v1"
    config = RemoteConfig(url, backoff_s=0.05, max_retries=0, connect_in_background=True)
    engine = RemoteClient(config, max_model_len=None)  # nothing listens there yet
    with pytest.raises(EngineStartingError, match="still starting"):
        engine.check_health()
    scripted_process.start(loading_s=1.0)  # then it loads for a second, answering 503
    wait_for(lambda: _healthy(engine))
    assert _answer(engine) == "Paris is the capital."

    scripted_process.kill()  # kill -9 under the client
    with pytest.raises(EngineUnavailableError, match="unreachable"):
        _answer(engine)
    with pytest.raises(EngineStartingError, match="unreachable"):
        engine.check_health()  # down: reconnecting, not failed

    scripted_process.start()
    wait_for(lambda: _healthy(engine))
    assert _answer(engine) == "Paris is the capital."
    engine.shutdown()


def test_an_answered_model_name_need_not_be_listed(remote: tuple[Script, str], caplog: Any) -> None:
    """Some servers (llama.cpp's) serve any model name they are asked for: not listed is a
    warning, not a failure."""
    _, url = remote
    engine = RemoteClient(RemoteConfig(url, model="my-alias", backoff_s=0.0), max_model_len=None)
    assert (engine.model_name, engine.max_model_len) == ("my-alias", 2048)
    assert "does not list 'my-alias'" in caplog.text
    engine.shutdown()
