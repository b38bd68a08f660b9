"""The OpenAI-compatible API driven by the official ``openai`` package, in-process against the
real app and model: raw generation (n, seed, logprobs, stop strings, lists of prompts,
streaming), the grounded ``ragguard`` model, errors in OpenAI's shape, API keys."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest
from fastapi.testclient import TestClient
from openai.types import Completion, CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam
from pydantic import BaseModel

from engine.outputs import streamable_text
from rag.server import create_app
from rag.server.admission import Admission
from rag.server.auth import Role
from tests.server_state import key_store, server_state

if TYPE_CHECKING:
    from rag.pipeline import Pipeline

QUESTION = "What does a KV cache avoid recomputing?"
CHAT: list[ChatCompletionMessageParam] = [
    {"role": "system", "content": "You are a concise assistant."},
    {"role": "user", "content": "Name three colours of the rainbow."},
]


@pytest.fixture
def http(demo_pipeline: Pipeline) -> Iterator[TestClient]:
    with TestClient(create_app(pipeline=demo_pipeline)) as test_client:
        yield test_client


@pytest.fixture
def client(http: TestClient) -> openai.OpenAI:
    # A TestClient is an httpx.Client: the openai client sends through the app in-process.
    return openai.OpenAI(
        base_url="http://testserver/v1", api_key="x", http_client=http, max_retries=0
    )


@pytest.fixture
def model(demo_pipeline: Pipeline) -> str:
    name: str = demo_pipeline.engine.model_name
    return name


def ragguard_of(response: BaseModel) -> dict[str, Any]:
    """The extra ``ragguard`` field of a grounded answer (or chunk)."""
    extra = response.model_extra or {}
    grounding: dict[str, Any] = extra["ragguard"]
    return grounding


def usage_of(response: Completion | ChatCompletion) -> CompletionUsage:
    assert response.usage is not None
    return response.usage


def error_of(exc: openai.APIStatusError) -> dict[str, Any]:
    """The ``error`` object of an OpenAI-shaped error response."""
    body = exc.response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    error: dict[str, Any] = body["error"]
    return error


def test_models_lists_the_loaded_and_the_grounded_model(
    client: openai.OpenAI, http: TestClient, model: str
) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == [model, "ragguard"]
    assert all(m.object == "model" and m.owned_by == "ragguard" for m in models.data)
    assert all(m.created > 0 for m in models.data)
    assert client.models.retrieve("ragguard").id == "ragguard"
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("gpt-4o")
    assert error_of(missing.value)["code"] == "model_not_found"
    paths = http.get("/openapi.json").json()["paths"]
    assert {"/v1/models", "/v1/completions", "/v1/chat/completions"} <= set(paths)


def test_chat_completion_with_n_seed_logprobs_and_usage(client: openai.OpenAI, model: str) -> None:
    def sample() -> ChatCompletion:
        return client.chat.completions.create(
            model=model,
            messages=CHAT,
            n=2,
            temperature=0.8,
            seed=7,
            max_tokens=8,
            logprobs=True,
            top_logprobs=3,
        )

    first = sample()
    assert first.object == "chat.completion" and first.model == model
    assert first.id.startswith("chatcmpl-")
    assert [c.index for c in first.choices] == [0, 1]
    counted = 0
    for choice in first.choices:
        assert choice.message.role == "assistant" and choice.message.content
        assert choice.finish_reason in ("stop", "length")
        assert choice.logprobs is not None and choice.logprobs.content is not None
        tokens = choice.logprobs.content
        assert 0 < len(tokens) <= 8
        if choice.finish_reason == "length":
            assert len(tokens) == 8
        # Decoded one by one, the tokens spell the completion.
        assert "".join(t.token for t in tokens) == choice.message.content
        for token in tokens:
            assert token.logprob <= 0.0 and token.bytes == list(token.token.encode())
            alternatives = [a.logprob for a in token.top_logprobs]
            assert 1 <= len(alternatives) <= 3
            assert alternatives == sorted(alternatives, reverse=True)
        counted += len(tokens)
    usage = usage_of(first)
    assert usage.prompt_tokens > 0 and usage.completion_tokens == counted
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    # The same seed samples the same completions.
    again = sample()
    assert [c.message.content for c in again.choices] == [c.message.content for c in first.choices]


def test_completions_with_a_list_of_prompts(client: openai.OpenAI, model: str) -> None:
    prompts = ["The capital of France is", "One, two, three,"]
    both = client.completions.create(
        model=model, prompt=prompts, max_tokens=6, temperature=0, logprobs=2
    )
    assert both.object == "text_completion" and both.id.startswith("cmpl-")
    assert [c.index for c in both.choices] == [0, 1]
    counted = 0
    for choice in both.choices:
        lp = choice.logprobs
        assert choice.text and lp is not None
        assert lp.tokens and lp.token_logprobs and lp.text_offset and lp.top_logprobs
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.text_offset)
        assert "".join(lp.tokens) == choice.text
        assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
        for chosen, top in zip(lp.tokens, lp.top_logprobs, strict=True):
            assert chosen in top and 1 <= len(top) <= 3
        counted += len(lp.tokens)
    assert usage_of(both).completion_tokens == counted
    # Each choice is what that prompt alone completes to (greedy), with n continuing the index.
    alone = client.completions.create(model=model, prompt=prompts[1], max_tokens=6, temperature=0)
    assert alone.choices[0].text == both.choices[1].text
    assert usage_of(alone).prompt_tokens < usage_of(both).prompt_tokens
    two_each = client.completions.create(
        model=model, prompt=prompts, max_tokens=2, temperature=0, n=2
    )
    assert [c.index for c in two_each.choices] == [0, 1, 2, 3]
    assert two_each.choices[2].text == two_each.choices[3].text
    assert both.choices[1].text.startswith(two_each.choices[2].text)


@pytest.mark.parametrize("penalty", ["frequency_penalty", "presence_penalty"])
def test_penalties_reach_the_sampler(client: openai.OpenAI, model: str, penalty: str) -> None:
    """Greedy decoding of a repeating prompt repeats; a penalty on repeated tokens breaks it."""
    prompt = "one, one, one, one, one, one,"
    plain = client.completions.create(model=model, prompt=prompt, max_tokens=16, temperature=0)
    penalised = client.completions.create(
        model=model,
        prompt=prompt,
        max_tokens=16,
        temperature=0,
        frequency_penalty=2.0 if penalty == "frequency_penalty" else 0.0,
        presence_penalty=2.0 if penalty == "presence_penalty" else 0.0,
    )
    words = [plain.choices[0].text.casefold(), penalised.choices[0].text.casefold()]
    assert words[1] != words[0]
    assert words[1].count("one") < words[0].count("one"), words


def test_usage_counts_the_prompt_tokens_served_from_the_prefix_cache(
    client: openai.OpenAI, model: str
) -> None:
    prompt = " ".join(f"Item {i} of the cached prompt test is number {i * 7}." for i in range(6))
    first = client.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0)
    again = client.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0)
    details = usage_of(again).prompt_tokens_details
    assert details is not None and details.cached_tokens is not None
    # Every full 16-token block but the one holding the last prompt token is reused.
    assert details.cached_tokens == (usage_of(first).prompt_tokens - 1) // 16 * 16 > 0


def test_streamed_chat_matches_the_whole_answer(client: openai.OpenAI, model: str) -> None:
    settings: dict[str, Any] = {
        "model": model,
        "messages": CHAT,
        "temperature": 0,
        "max_tokens": 12,
    }
    whole = client.chat.completions.create(**settings)
    chunks = list(
        client.chat.completions.create(
            **settings, stream=True, stream_options={"include_usage": True}
        )
    )
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content and text
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert reasons[-1] == whole.choices[0].finish_reason and not any(reasons[:-1])
    usage = chunks[-1]
    assert usage.choices == [] and usage.usage is not None
    assert usage.usage.completion_tokens == whole.usage.completion_tokens
    assert usage.usage.prompt_tokens == whole.usage.prompt_tokens


def test_stop_strings_end_the_completion(client: openai.OpenAI, model: str) -> None:
    free = client.chat.completions.create(model=model, messages=CHAT, temperature=0, max_tokens=16)
    full = free.choices[0].message.content
    assert full
    # A word from the middle of the answer, where it first appears.
    stop = next(w for w in full.split()[1:] if full.find(w) > 0)
    expected = full[: full.find(stop)]

    stopped = client.chat.completions.create(
        model=model,
        messages=CHAT,
        temperature=0,
        max_tokens=16,
        stop=[stop, "never appears"],
    )
    assert stopped.choices[0].message.content == expected
    assert stopped.choices[0].finish_reason == "stop"

    streamed = client.completions.create(
        model=model, prompt="Count: one, two, three,", temperature=0, max_tokens=12, stream=True
    )
    pieces = [c.choices[0] for c in streamed]
    whole = "".join(p.text for p in pieces)
    stop = whole.strip().split()[1]
    cut = whole[: whole.find(stop)]
    stopped_stream = client.completions.create(
        model=model,
        prompt="Count: one, two, three,",
        temperature=0,
        max_tokens=12,
        stop=stop,
        stream=True,
    )
    chunks = [c.choices[0] for c in stopped_stream]
    assert len(cut) < len(whole)
    assert "".join(p.text for p in chunks) == cut  # nothing of the stop string was sent
    assert chunks[-1].finish_reason == "stop"


def test_streams_hold_back_what_a_stop_string_or_a_character_may_complete() -> None:
    assert streamable_text("Hello wor", ["world"]) == "Hello "
    assert streamable_text("Hello world", ["xyz"]) == "Hello world"
    assert streamable_text("a\n", ["\n\n", "b"]) == "a"
    assert streamable_text("caf\ufffd", []) == "caf"  # half of a UTF-8 character so far


def test_errors_come_back_in_openai_shape(
    client: openai.OpenAI, http: TestClient, model: str
) -> None:
    with pytest.raises(openai.BadRequestError) as hot:
        client.chat.completions.create(model=model, messages=CHAT, temperature=9, max_tokens=4)
    error = error_of(hot.value)
    assert error["param"] == "temperature" and error["type"] == "invalid_request_error"
    assert "temperature" in error["message"]

    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model="gpt-4o", messages=CHAT, max_tokens=4)
    assert error_of(unknown.value)["code"] == "model_not_found"
    assert error_of(unknown.value)["param"] == "model"

    # Request validation (pydantic) errors too, and a grounded request for two answers.
    with pytest.raises(openai.BadRequestError) as empty:
        client.chat.completions.create(model=model, messages=[], max_tokens=4)
    assert error_of(empty.value)["param"] == "messages"
    with pytest.raises(openai.BadRequestError) as two:
        client.chat.completions.create(model="ragguard", messages=CHAT, n=2)
    assert error_of(two.value)["param"] == "n"
    with pytest.raises(openai.BadRequestError) as top_p:
        client.completions.create(model=model, prompt="Hi", top_p=0, max_tokens=4)
    assert error_of(top_p.value)["param"] == "top_p"

    broken = http.post(
        "/v1/chat/completions",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert broken.status_code == 400 and broken.json()["error"]["type"] == "invalid_request_error"
    # The other routes keep ragguard's own error shape.
    assert set(http.post("/v1/ask", json={}).json()) == {"detail", "error"}


def test_overload_is_a_429_with_retry_after(
    client: openai.OpenAI, http: TestClient, model: str
) -> None:
    state = server_state(http)
    state.admission = Admission(1, 0, state.telemetry.load)  # one at work, none waiting

    async def while_busy() -> None:
        async with state.admission.slot():
            for stream in (False, True):
                with pytest.raises(openai.RateLimitError) as refused:
                    client.chat.completions.create(
                        model=model,
                        messages=CHAT,
                        max_tokens=4,
                        stream=stream,
                    )
                assert int(refused.value.response.headers["retry-after"]) >= 1
                assert error_of(refused.value)["code"] == "overloaded"

    asyncio.run(while_busy())
    assert state.telemetry.registry.get_sample_value("ragguard:request_rejected_total") == 2
    # Free again: served.
    served = client.chat.completions.create(model=model, messages=CHAT, max_tokens=2)
    assert served.choices[0].message.content is not None


def test_grounded_model_answers_from_the_index(client: openai.OpenAI, http: TestClient) -> None:
    chat = client.chat.completions.create(
        model="ragguard",
        messages=[
            {"role": "system", "content": "ignored: the pipeline writes its own prompt"},
            {"role": "user", "content": QUESTION},
        ],
        max_tokens=16,
        temperature=0,
        extra_body={"index": "demo", "top_k": 3},
    )
    assert chat.model == "ragguard"
    grounding = ragguard_of(chat)
    assert grounding["passages"] and len(grounding["passages"]) <= 3
    assert grounding["passages"][0]["doc_id"] == "kv-cache.md"
    assert grounding["decision"] in ("answer", "abstain", "review")
    assert (grounding["review_id"] is not None) == (grounding["decision"] == "review")
    assert grounding["decision_reasons"] and 0.0 <= grounding["confidence"] <= 1.0
    assert chat.choices[0].message.content == grounding["answer"]
    assert grounding["abstained"] == (grounding["decision"] == "abstain")
    if not grounding["abstained"]:
        assert grounding["citations"][0]["doc_id"] == "kv-cache.md"
    assert {g["name"] for g in grounding["guard_results"]} >= {"repetition", "grounding"}
    assert usage_of(chat).completion_tokens > 0 and usage_of(chat).prompt_tokens > 0

    # A confidence bar no answer clears withholds it: "I don't know.", with the reasons.
    withheld = client.completions.create(
        model="ragguard",
        prompt=QUESTION,
        max_tokens=16,
        temperature=0,
        extra_body={"abstain_below": 1.0, "review_below": 1.0},
    )
    grounding = ragguard_of(withheld)
    assert withheld.object == "text_completion"
    assert grounding["abstained"] and grounding["decision"] == "abstain"
    assert withheld.choices[0].text == grounding["answer"] == "I don't know."
    assert grounding["decision_reasons"] and grounding["citations"] == []

    with pytest.raises(openai.BadRequestError) as bad_index_option:
        client.chat.completions.create(
            model="ragguard",
            messages=[{"role": "user", "content": QUESTION}],
            extra_body={"top_k": 0},
        )
    assert error_of(bad_index_option.value)["param"] == "top_k"
    metrics = http.get("/metrics").text
    assert 'ragguard:decisions_total{decision="abstain"}' in metrics


def test_grounded_streaming_and_concurrent_requests_async(http: TestClient, model: str) -> None:
    app = http.app  # the TestClient keeps the lifespan running; ASGITransport does not run it

    async def main() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as h:
            client = openai.AsyncOpenAI(  # takes an httpx (not only an httpx2) client
                base_url="http://testserver/v1",
                api_key="x",
                http_client=h,  # type: ignore[arg-type]
                max_retries=0,
            )
            stream = await client.chat.completions.create(
                model="ragguard",
                messages=[{"role": "user", "content": QUESTION}],
                max_tokens=16,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
            )
            chunks = [chunk async for chunk in stream]
            assert chunks[0].choices[0].delta.role == "assistant"
            final = next(c for c in chunks if c.choices and c.choices[0].finish_reason)
            grounding = ragguard_of(final)
            assert grounding["decision"] in ("answer", "abstain", "review")
            assert grounding["confidence"] is not None and grounding["guard_results"]
            assert grounding["passages"][0]["doc_id"] == "kv-cache.md"
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            if not grounding["abstained"]:
                assert text == grounding["answer"]
                assert grounding["citations"][0]["doc_id"] == "kv-cache.md"
            assert all("ragguard" not in (c.model_extra or {}) for c in chunks if c is not final)
            assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0

            # Two requests at once share the engine's batches; each gets its own answer.
            prompts = ["The capital of France is", "The capital of Italy is"]
            together = await asyncio.gather(
                *(
                    client.completions.create(model=model, prompt=p, max_tokens=4, temperature=0)
                    for p in prompts
                )
            )
            one = await client.completions.create(
                model=model, prompt=prompts[1], max_tokens=4, temperature=0
            )
            assert together[1].choices[0].text == one.choices[0].text
            assert together[0].id != together[1].id

    asyncio.run(main())


def test_api_keys_are_bearer_tokens(http: TestClient, model: str) -> None:
    keys = key_store(http)
    app_key = keys.create("web", Role.APP)
    reviewer_key = keys.create("ann", Role.REVIEWER)

    def client_with(key: str) -> openai.OpenAI:
        return openai.OpenAI(
            base_url="http://testserver/v1", api_key=key, http_client=http, max_retries=0
        )

    assert [m.id for m in client_with(app_key).models.list().data] == [model, "ragguard"]
    with pytest.raises(openai.AuthenticationError) as wrong:
        client_with("rg_wrong").models.list()
    assert error_of(wrong.value)["type"] == "authentication_error"
    assert wrong.value.response.headers["www-authenticate"] == "Bearer"
    with pytest.raises(openai.AuthenticationError):
        client_with("rg_wrong").chat.completions.create(model=model, messages=CHAT, max_tokens=2)
    with pytest.raises(openai.PermissionDeniedError) as reviewer:
        client_with(reviewer_key).models.list()
    assert error_of(reviewer.value)["type"] == "permission_error"
