"""Bad input at the HTTP edge: every bound stated in the schema and enforced with a 4xx in our
error shape (never a 500), values of another type refused rather than coerced, bodies that are
not UTF-8 refused, and the API docs served without a CDN."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from fastapi.testclient import TestClient

from engine.sampling_params import SamplingParams
from rag.errors import InvalidInputError
from rag.retrieval.collection import check_index_name
from rag.server import create_app
from rag.settings import MAX_QUESTION_CHARS, Settings

if TYPE_CHECKING:
    from rag.pipeline import Pipeline

JSON = {"content-type": "application/json"}


@pytest.fixture
def client(fake_pipeline: Pipeline) -> Iterator[TestClient]:
    with TestClient(create_app(pipeline=fake_pipeline)) as http:
        yield http


@pytest.fixture
def openapi(client: TestClient) -> dict[str, Any]:
    schema: dict[str, Any] = client.get("/openapi.json").json()
    return schema


def assert_refused(response: Any, status: int, error: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"detail", "error"} and body["error"] == error


def operations(openapi: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, methods in openapi["paths"].items():
        for method, operation in methods.items():
            yield path, method, operation


def body_schema(openapi: dict[str, Any], name: str) -> dict[str, Any]:
    schema: dict[str, Any] = openapi["components"]["schemas"][name]
    return schema


def nullable(prop: dict[str, Any]) -> dict[str, Any]:
    """The non-null branch of ``X | None``."""
    branches = [b for b in prop.get("anyOf", [prop]) if b.get("type") != "null"]
    assert len(branches) == 1
    return branches[0]


# ------------------------------------------------------------------ offsets and limits
def test_a_huge_offset_is_a_422_not_an_overflow(client: TestClient) -> None:
    for offset in ("9223372036854775808", str(2**31 + 1), "-1"):
        assert_refused(client.get(f"/v1/documents?offset={offset}"), 422, "invalid_request")
        assert_refused(client.get(f"/v1/reviews?offset={offset}"), 422, "invalid_request")
    page = client.get(f"/v1/documents?offset={2**31}&limit=1000")
    assert page.status_code == 200 and page.json()["documents"] == []
    assert_refused(client.get("/v1/documents?limit=1001"), 422, "invalid_request")


def test_every_offset_and_limit_states_its_range(openapi: dict[str, Any]) -> None:
    seen = 0
    for path, method, operation in operations(openapi):
        for param in operation.get("parameters", []):
            if param["name"] in ("offset", "limit"):
                seen += 1
                assert {"minimum", "maximum"} <= set(param["schema"]), (method, path, param)
    assert seen >= 4


# ---------------------------------------------------------------- the question's length
def test_the_ask_schema_states_the_servers_question_limit(
    client: TestClient, openapi: dict[str, Any]
) -> None:
    question = body_schema(openapi, "AskRequest")["properties"]["question"]
    assert (
        question["maxLength"]
        == MAX_QUESTION_CHARS
        == Settings(_env_file=None).server.max_question_chars
    )
    too_long = client.post("/v1/ask", json={"question": "x" * (MAX_QUESTION_CHARS + 1)})
    assert_refused(too_long, 422, "invalid_request")
    assert too_long.json()["detail"][0]["loc"] == ["body", "question"]


def test_the_setting_may_lower_the_limit_but_not_raise_it() -> None:
    assert Settings(_env_file=None, max_question_chars=100).server.max_question_chars == 100
    with pytest.raises(ValueError, match="max_question_chars"):
        Settings(_env_file=None, max_question_chars=MAX_QUESTION_CHARS + 1)


# ---------------------------------------------------------------- strict types
@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/ask", {"question": "Why?", "review_below": False}, "review_below"),
        ("/v1/ask", {"question": "Why?", "top_k": "3"}, "top_k"),
        ("/v1/ask", {"question": "Why?", "top_k": 3.0}, "top_k"),
        ("/v1/ask", {"question": "Why?", "stream": 0}, "stream"),
        ("/v1/ask", {"question": 7}, "question"),
        ("/v1/reviews/gold", {"question": "q", "answer": "a", "correct": 0}, "correct"),
        ("/v1/reviews/gold", {"question": "q", "answer": "a", "correct": "true"}, "correct"),
        ("/v1/reviews/next", {"ttl_s": "60"}, "ttl_s"),
        ("/v1/keys", {"name": "k", "role": "app", "extra": 1}, "extra"),
    ],
)
def test_values_of_another_type_are_refused_not_coerced(
    client: TestClient, path: str, body: dict[str, Any], field: str
) -> None:
    response = client.post(path, json=body)
    assert_refused(response, 422, "invalid_request")
    assert response.json()["detail"][0]["loc"][-1] == field


def test_a_json_integer_is_a_number(client: TestClient) -> None:
    # An unknown index answers 404 after validation, without running the model.
    ints = {"question": "Why?", "index": "nosuch", "min_score": 0, "temperature": 1}
    assert_refused(client.post("/v1/ask", json=ints), 404, "index_not_found")
    claim = client.post("/v1/reviews/next", json={"ttl_s": 60})
    assert claim.status_code == 200 and claim.json() is None


def test_nan_and_infinity_are_refused(client: TestClient) -> None:
    for literal in (b"NaN", b"Infinity", b"1e999"):
        body = b'{"question": "Why?", "min_score": ' + literal + b"}"
        assert_refused(client.post("/v1/ask", content=body, headers=JSON), 422, "invalid_request")


def test_the_openai_routes_are_strict_too(client: TestClient, model: str) -> None:
    chat = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    for wrong in ({"n": "1"}, {"n": 1.0}, {"stream": 0}, {"logprobs": "yes"}, {"n": 65}):
        response = client.post("/v1/chat/completions", json={**chat, **wrong})
        assert response.status_code == 400, (wrong, response.text)
        assert response.json()["error"]["param"] == next(iter(wrong))
    # What OpenAI's clients send: integers for float fields.
    unknown = {**chat, "model": "nosuch", "temperature": 0, "top_p": 1, "presence_penalty": 0}
    assert client.post("/v1/chat/completions", json=unknown).status_code == 404


@pytest.fixture
def model(fake_pipeline: Pipeline) -> str:
    name: str = fake_pipeline.engine.model_name
    return name


def test_the_openai_ranges_are_the_engines(openapi: dict[str, Any]) -> None:
    props = body_schema(openapi, "ChatCompletionRequest")["properties"]
    n, temperature = nullable(props["n"]), nullable(props["temperature"])
    max_tokens, penalty = nullable(props["max_tokens"]), nullable(props["presence_penalty"])
    SamplingParams(n=n["maximum"], temperature=temperature["maximum"])
    SamplingParams(max_tokens=max_tokens["maximum"], presence_penalty=penalty["minimum"])
    for beyond in (
        {"n": n["maximum"] + 1},
        {"temperature": temperature["maximum"] + 0.01},
        {"max_tokens": max_tokens["maximum"] + 1},
        {"presence_penalty": penalty["minimum"] - 0.01},
    ):
        with pytest.raises(ValueError):
            SamplingParams(**beyond)


# ------------------------------------------------------------------ index names
def test_an_empty_or_malformed_index_name_is_an_error(client: TestClient) -> None:
    for name in ("", "demo\n", "../etc", "-x", "a" * 65):
        assert_refused(
            client.post("/v1/ask", json={"question": "Why?", "index": name}), 422, "invalid_request"
        )
        assert_refused(client.get("/v1/documents", params={"index": name}), 422, "invalid_request")
        doc = {"doc_id": "d", "text": "t"}
        assert_refused(
            client.post("/v1/documents", params={"index": name}, json=doc), 422, "invalid_request"
        )
        chat = {
            "model": "ragguard",
            "messages": [{"role": "user", "content": "Why?"}],
            "index": name,
        }
        openai_error = client.post("/v1/chat/completions", json=chat)
        assert openai_error.status_code == 400 and openai_error.json()["error"]["param"] == "index"
    by_path = client.get("/v1/indexes/-x")
    assert_refused(by_path, 422, "invalid_request")
    assert "invalid index name '-x': use 1-64 letters" in by_path.json()["detail"][0]["msg"]


def test_index_names_with_a_trailing_newline_are_refused() -> None:
    assert check_index_name("demo") == "demo"
    with pytest.raises(InvalidInputError):
        check_index_name("demo\n")


def test_the_schema_states_what_an_index_name_may_be(openapi: dict[str, Any]) -> None:
    index = nullable(body_schema(openapi, "AskRequest")["properties"]["index"])
    assert index["minLength"] == 1 and index["pattern"]
    assert re.fullmatch(index["pattern"], "demo") and not re.fullmatch(index["pattern"], "")


# ------------------------------------------------------------------ body encoding
@pytest.mark.parametrize(
    "body",
    [
        b'\xff\xfe{"question": "Why?"}',
        '{"question": "Why?"}'.encode("utf-16"),
        '{"question": "Why?"}'.encode("utf-16-le"),
        b'{"question": "caf\xe9?"}',
        b"\xc3",
    ],
)
def test_a_body_that_is_not_utf8_is_a_400(client: TestClient, body: bytes) -> None:
    for path in ("/v1/ask", "/v1/reviews/gold", "/v1/documents", "/v1/keys"):
        response = client.post(path, content=body, headers=JSON)
        assert_refused(response, 400, "invalid_encoding")
        assert "UTF-8" in response.json()["detail"]
    openai_error = client.post("/v1/chat/completions", content=body, headers=JSON)
    assert openai_error.status_code == 400
    assert openai_error.json()["error"]["code"] == "invalid_encoding"
    assert "UTF-8" in openai_error.json()["error"]["message"]


def test_the_400_is_documented(openapi: dict[str, Any]) -> None:
    assert "invalid_encoding" in openapi["info"]["description"]
    for path, method, operation in operations(openapi):
        if "requestBody" in operation:
            assert "400" in operation["responses"], (method, path)


def test_utf8_bodies_and_file_uploads_pass(client: TestClient) -> None:
    body = '{"question": "Was kostet ein Café?", "index": "nosuch"}'.encode()
    assert_refused(client.post("/v1/ask", content=body, headers=JSON), 404, "index_not_found")
    # A file upload is not JSON: it reaches the parser, which names the file.
    latin1 = ("upload.txt", "Ein Café in München.".encode("latin-1"), "text/plain")
    upload = client.post("/v1/documents", files={"file": latin1})
    assert_refused(upload, 422, "unreadable_document")
    assert "upload.txt" in upload.json()["detail"]


# ------------------------------------------------------------------ offline docs
@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_docs_load_nothing_from_other_hosts(client: TestClient, page: str) -> None:
    html = client.get(page)
    assert html.status_code == 200
    assert not re.search(r"(?:https?:)?//[A-Za-z0-9]", html.text), "an external URL"
    assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html.text)
    assert any(a.endswith(".js") for a in assets)
    for asset in assets:
        response = client.get(asset)
        assert response.status_code == 200, asset
        kind = response.headers["content-type"]
        expected = {".js": "javascript", ".css": "text/css", ".png": "image/png"}
        suffix = asset[asset.rfind(".") :]
        assert expected[suffix] in kind, (asset, kind)
        assert len(response.content) > 1000
