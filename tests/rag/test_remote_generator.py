"""ragguard over a remote generator, end to end over real HTTP: a second process serves the
default model through our OpenAI-compatible API, and the pipeline, the guards and the engine
client run against it (RAGGUARD_GENERATOR=openai)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from engine import RemoteClient, RemoteConfig, SamplingParams, generate_all
from guards import Action
from rag.pipeline import Pipeline
from rag.settings import Settings
from rag.types import ResultEvent

if TYPE_CHECKING:
    from engine import LLMEngine

pytestmark = [pytest.mark.model, pytest.mark.slow]  # a second server process: ~55 s

PROMPT_MESSAGES = [{"role": "user", "content": "Name three colours."}]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def remote_url(
    tmp_path_factory: pytest.TempPathFactory, demo_index_template: Path
) -> Iterator[str]:
    """``ragguard serve`` in a child process (the independent server); its OpenAI base URL."""
    root = tmp_path_factory.mktemp("remote-server")
    shutil.copytree(demo_index_template, root / "indexes" / "demo")
    port = _free_port()
    log = root / "server.log"
    env = {**os.environ, "RAGGUARD_INDEX_DIR": str(root / "indexes")}
    # float32 as the local engine it is compared with (the CPU default, int8, rounds differently
    # by batch shape and prefix-cache state, so greedy answers need not match across them).
    env["RAGGUARD_QUANTIZATION"] = "none"
    env["RAGGUARD_DATA_DIR"] = str(root / "data")
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "rag.cli", "serve", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=root,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the remote server was not ready in 300 s"
            try:
                if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        yield f"{url}/v1"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="module")
def remote(remote_url: str) -> RemoteClient:
    return RemoteClient(RemoteConfig(remote_url, tokenizer="default"), max_model_len=None)


def test_greedy_answers_equal_the_local_engines(
    remote: RemoteClient, llm_engine: LLMEngine
) -> None:
    prompt = remote.apply_chat_template(PROMPT_MESSAGES)
    assert prompt == llm_engine.apply_chat_template(PROMPT_MESSAGES)
    assert remote.count_tokens(prompt) == llm_engine.count_tokens(prompt)
    assert remote.max_model_len == llm_engine.max_model_len  # read from the model card
    params = SamplingParams(max_tokens=24)
    local = llm_engine.generate([prompt], params)[0].outputs[0]
    far = asyncio.run(generate_all(remote, prompt, params))
    answer = far.outputs[0]
    assert answer.text == local.text
    assert answer.token_ids == local.token_ids  # the local tokenizer maps the tokens back
    assert answer.logprobs == pytest.approx(local.logprobs, abs=1e-3)
    assert far.num_prompt_tokens == len(llm_engine.prompts.encode(prompt))


def test_seeded_samples_are_reproducible(remote: RemoteClient) -> None:
    prompt = remote.apply_chat_template(PROMPT_MESSAGES)
    params = SamplingParams(n=3, temperature=1.0, seed=11, max_tokens=12, logprobs=2)
    first, second = (asyncio.run(generate_all(remote, prompt, params)) for _ in range(2))
    assert [o.text for o in first.outputs] == [o.text for o in second.outputs]
    assert len(first.outputs) == 3 and all(o.finished for o in first.outputs)
    top = first.outputs[0].top_logprobs
    assert top is not None and all(first.outputs[0].token_ids[i] in top[i] for i in range(3))


def running_requests(base: str) -> float:
    text = httpx.get(base.removesuffix("/v1") + "/metrics", timeout=10).text
    found = re.search(r"^ragguard:num_sequences_running (\S+)$", text, re.MULTILINE)
    assert found, "no running gauge on /metrics"
    return float(found.group(1))


def test_leaving_the_stream_aborts_the_remote_generation(
    remote: RemoteClient, remote_url: str
) -> None:
    prompt = remote.apply_chat_template(PROMPT_MESSAGES)
    params = SamplingParams(max_tokens=2000, ignore_eos=True)

    async def two_chunks() -> int:
        seen = 0
        async for output in remote.generate(prompt, params):
            seen += 1
            assert not output.finished
            if seen == 2:
                break
        return seen

    assert asyncio.run(two_chunks()) == 2
    deadline = time.monotonic() + 60
    while running_requests(remote_url) > 0:  # the remote server sees the hang-up and aborts
        assert time.monotonic() < deadline, "the remote generation kept running"
        time.sleep(0.2)


def test_the_pipeline_and_guards_run_over_the_remote_generator(
    remote_url: str, tmp_path: Path, demo_index_template: Path
) -> None:
    shutil.copytree(demo_index_template, tmp_path / "indexes" / "demo")
    settings = Settings(
        index_dir=tmp_path / "indexes",
        data_dir=tmp_path / "data",
        generator="openai",
        generator_url=remote_url,
        generator_tokenizer="default",
        max_tokens=48,
        _env_file=None,
    )
    pipeline = Pipeline.from_settings(settings)
    try:
        assert isinstance(pipeline.engine, RemoteClient)
        result = pipeline.ask("What does a KV cache avoid recomputing?")
        assert result.answer and result.passages and result.guard_results
        assert result.decision in set(Action)
        assert result.usage.prompt_tokens > 100 and result.usage.completion_tokens > 0
        streamed = list(pipeline.ask_stream("What does a KV cache avoid recomputing?"))
        assert isinstance(streamed[-1], ResultEvent)
        assert streamed[-1].result.answer == result.answer  # greedy: the same answer
    finally:
        pipeline.close()


def test_a_model_the_server_does_not_serve_is_a_typed_error(remote_url: str) -> None:
    from engine import RemoteRequestError

    engine = RemoteClient(
        RemoteConfig(remote_url, model="no-such-model", max_retries=0), max_model_len=2048
    )
    with pytest.raises(RemoteRequestError) as refused:
        asyncio.run(generate_all(engine, "Hello", SamplingParams(max_tokens=4)))
    assert refused.value.status_code in (400, 404)
