"""The remote generator's protocol handling over real HTTP, against a scripted OpenAI-compatible
server: streamed chunks into outputs, retries with backoff on 429 and 5xx, typed errors, the
stop check run locally, and the estimate used without a tokenizer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from engine import (
    EngineConfig,
    EngineUnavailableError,
    FinishReason,
    RemoteBusyError,
    RemoteRequestError,
    SamplingParams,
    build_engine_client,
    generate_all,
)
from engine.remote import RemoteClient, RemoteConfig, chatml
from tests.scripted_openai import Script, scripted_app

if TYPE_CHECKING:
    from starlette.types import ASGIApp


@pytest.fixture
def remote(live_server: Callable[[ASGIApp], str]) -> tuple[Script, str]:
    script = Script()
    return script, live_server(scripted_app(script)) + "/v1"


def client(url: str, **options: Any) -> RemoteClient:
    return RemoteClient(RemoteConfig(url, backoff_s=0.0, **options), max_model_len=None)


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_chunks_become_outputs_and_the_model_card_is_read(remote: tuple[Script, str]) -> None:
    script, url = remote
    engine = client(url, api_key="sk-test")
    assert (engine.model_name, engine.max_model_len) == ("scripted", 512)
    params = SamplingParams(n=2, temperature=0.7, seed=3, max_tokens=9, logprobs=1, stop=["\n"])
    out = run(generate_all(engine, "Where is Paris?", params))
    assert [o.text for o in out.outputs] == ["Paris is the capital."] * 2
    assert all(
        o.logprobs == [-0.5] * 5 and o.finish_reason is FinishReason.STOP for o in out.outputs
    )
    assert out.outputs[0].top_logprobs is not None and len(out.outputs[0].top_logprobs) == 5
    assert out.num_prompt_tokens == 7 and out.num_completion_tokens == 10
    sent = script.bodies[0]
    assert sent["model"] == "scripted" and sent["stream"] is True and sent["n"] == 2
    assert (sent["seed"], sent["max_tokens"], sent["stop"], sent["logprobs"]) == (3, 9, ["\n"], 1)
    assert "top_k" not in sent and "repetition_penalty" not in sent  # defaults: not sent


def test_429_and_503_are_retried_then_answered(remote: tuple[Script, str]) -> None:
    script, url = remote
    script.failures = [(429, {"retry-after": "0"}), (503, {})]
    out = run(generate_all(client(url), "q", SamplingParams(max_tokens=5)))
    assert out.outputs[0].text == "Paris is the capital." and len(script.bodies) == 3


def test_errors_become_typed_after_the_retries(remote: tuple[Script, str]) -> None:
    script, url = remote
    engine = client(url, max_retries=1)
    script.failures = [(429, {"retry-after": "0"})] * 2
    with pytest.raises(RemoteBusyError) as busy:
        run(generate_all(engine, "q", SamplingParams()))
    assert busy.value.retry_after_s == 0
    script.failures = [(500, {})] * 2
    with pytest.raises(EngineUnavailableError, match="500"):
        run(generate_all(engine, "q", SamplingParams()))
    script.failures = [(400, {})]
    with pytest.raises(RemoteRequestError, match="scripted 400") as refused:
        run(generate_all(engine, "q", SamplingParams()))
    assert refused.value.status_code == 400 and len(script.bodies) == 5  # a 400 is not retried


def test_an_unreachable_server_is_unavailable() -> None:
    with pytest.raises(EngineUnavailableError, match="did not come up"):
        client("http://127.0.0.1:9/v1", startup_timeout_s=0.2)  # the card lookup fails
    engine = client("http://127.0.0.1:9/v1", model="m", max_model_len=64, max_retries=1)
    with pytest.raises(EngineUnavailableError, match="unreachable"):
        run(generate_all(engine, "q", SamplingParams()))


def test_the_stop_check_runs_locally_and_ends_the_completion(remote: tuple[Script, str]) -> None:
    _, url = remote

    def stop_at_third(token_ids: Any) -> str | None:
        return "enough" if len(token_ids) >= 3 else None

    out = run(generate_all(client(url), "q", SamplingParams(stop_check=stop_at_third)))
    completion = out.outputs[0]
    assert completion.text == "Paris is the" and completion.stop_reason == "enough"
    assert completion.finish_reason is FinishReason.STOP


def test_a_stop_check_ending_every_completion_closes_the_stream(
    remote: tuple[Script, str],
) -> None:
    script, url = remote
    script.words, script.delay_s = [" la"] * 400, 0.005  # two seconds of stream, at the least

    def stop_at_third(token_ids: Any) -> str | None:
        return "enough" if len(token_ids) >= 3 else None

    out = run(generate_all(client(url), "q", SamplingParams(stop_check=stop_at_third)))
    assert out.outputs[0].text == " la la la" and out.outputs[0].stop_reason == "enough"
    # Reading on to the server's end would have taken all 400 chunks; the client hung up.
    assert script.sent < 100


def test_without_a_tokenizer_prompts_are_chatml_and_counts_an_estimate(
    remote: tuple[Script, str],
) -> None:
    _, url = remote
    engine = client(url)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert engine.apply_chat_template(messages) == chatml(messages)
    assert chatml(messages).endswith("<|im_start|>assistant\n")
    assert engine.count_tokens("x" * 30) == 10 and engine.count_tokens("x" * 31) == 11
    assert engine.token_id("Paris") == engine.token_id("Paris") < 0
    with pytest.raises(RemoteRequestError, match="tokenizer"):
        run(generate_all(engine, [1, 2, 3], SamplingParams()))


def test_the_registry_builds_it_and_a_config_is_checked(remote: tuple[Script, str]) -> None:
    _, url = remote
    engine = build_engine_client(EngineConfig(), "openai", RemoteConfig(url))
    assert isinstance(engine, RemoteClient) and engine.model_name == "scripted"
    with pytest.raises(ValueError, match="remote"):
        build_engine_client(EngineConfig(), "openai")
    with pytest.raises(ValueError, match="http"):
        RemoteConfig("ftp://host/v1")
