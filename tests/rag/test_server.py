"""The REST API over real HTTP semantics (TestClient): routes and bad input over the fake models
(real FAISS, SQLite, guards and policy), and the answers themselves with the real pipeline."""

from __future__ import annotations

import io
import logging
import multiprocessing
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient

from rag.server import create_app

if TYPE_CHECKING:
    import httpx2  # starlette's TestClient is an httpx2.Client

    from rag.pipeline import Pipeline
    from rag.settings import Settings


@pytest.fixture
def client(fake_pipeline: Pipeline) -> Iterator[TestClient]:
    fake_pipeline.settings.server.max_upload_bytes = 4096
    with TestClient(create_app(pipeline=fake_pipeline)) as http:
        yield http


@pytest.fixture
def model_client(demo_pipeline: Pipeline) -> Iterator[TestClient]:
    with TestClient(create_app(pipeline=demo_pipeline)) as http:
        yield http


def index_state(client: TestClient) -> tuple[int, int, int]:
    info = client.get("/v1/indexes/demo").json()
    return info["num_documents"], info["num_chunks"], info["generation"]


def num_documents(client: TestClient, index: str | None = None) -> int:
    params = {"index": index} if index else {}
    total: int = client.get("/v1/documents", params=params).json()["total"]
    return total


def test_health_ready_and_openapi(model_client: TestClient) -> None:
    client = model_client
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and ready["model"] == "SmolLM2-135M-Instruct"
    assert "demo" in ready["indexes"]
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/v1/ask", "/v1/documents", "/v1/documents/{doc_id}", "/healthz", "/readyz"} <= set(
        paths
    )
    assert "multipart/form-data" in paths["/v1/documents"]["post"]["requestBody"]["content"]
    assert client.get("/docs").status_code == 200


def test_ask_returns_a_cited_answer(model_client: TestClient) -> None:
    client = model_client
    response = client.post("/v1/ask", json={"question": "What does a KV cache avoid recomputing?"})
    assert response.status_code == 200
    body = response.json()
    assert body["citations"] and body["citations"][0]["doc_id"] == "kv-cache.md"
    assert body["usage"]["completion_tokens"] > 0 and body["timings"]["total_s"] > 0
    assert body["decision"] == "answer" and 0 <= body["confidence"] <= 1
    assert {g["name"] for g in body["guard_results"]} >= {
        "repetition",
        "grounding",
        "knowledge_graph",
    }
    assert response.headers["x-request-id"]
    strict = {"question": "What does a KV cache avoid recomputing?", "review_below": 0.9999}
    flagged = client.post("/v1/ask", json=strict).json()
    assert flagged["decision"] == "review" and flagged["review_id"]
    assert any("< 0.9999" in reason for reason in flagged["decision_reasons"])


def test_documents_json_upload_list_delete_and_ask_the_new_fact(model_client: TestClient) -> None:
    client = model_client
    before = num_documents(client)
    created = client.post(
        "/v1/documents",
        json={"doc_id": "zephyr", "text": "The Zephyr-9 router ships with 12 Ethernet ports."},
    )
    assert created.status_code == 201 and created.json()["added"] == ["zephyr"]
    assert client.post(
        "/v1/documents",
        json={"doc_id": "zephyr", "text": "The Zephyr-9 router ships with 12 Ethernet ports."},
    ).json()["skipped"] == ["zephyr"]

    upload = client.post(
        "/v1/documents",
        files={
            "file": (
                "notes/orbit.md",
                io.BytesIO(b"# Orbit\n\nThe Moon orbits Earth in 27.3 days."),
            )
        },
        data={"doc_id": "orbit"},
    )
    assert upload.status_code == 201 and upload.json()["added"] == ["orbit"]
    assert num_documents(client) == before + 2

    answer = client.post(
        "/v1/ask", json={"question": "How many Ethernet ports does the Zephyr-9 router have?"}
    )
    assert answer.json()["citations"][0]["doc_id"] == "zephyr"
    assert "12" in answer.json()["answer"]

    listed = client.get("/v1/documents", params={"limit": 1000}).json()
    assert {"zephyr", "orbit"} <= {d["doc_id"] for d in listed["documents"]}
    assert client.delete("/v1/documents/orbit").status_code == 204
    assert num_documents(client) == before + 1


def test_document_ids_with_slashes_can_be_deleted(client: TestClient) -> None:
    client.post("/v1/documents", json={"doc_id": "guides/setup.md", "text": "Run make serve."})
    assert client.delete("/v1/documents/guides/setup.md").status_code == 204


def test_new_index_is_created_by_posting_to_it(client: TestClient) -> None:
    response = client.post(
        "/v1/documents",
        params={"index": "team-a"},
        json={"doc_id": "x", "text": "Team A owns billing."},
    )
    assert response.status_code == 201 and response.json()["index"] == "team-a"
    assert num_documents(client, "team-a") == 1
    assert client.get("/v1/indexes/team-a").json()["num_documents"] == 1


@pytest.mark.parametrize(
    ("method", "url", "kwargs", "status", "fragment"),
    [
        ("post", "/v1/ask", {"json": {"question": ""}}, 422, "at least 1 character"),
        ("post", "/v1/ask", {"json": {"question": "why? " * 500}}, 422, "at most 2000"),
        (
            "post",
            "/v1/ask",
            {"json": {"question": "hi", "top_k": 0}},
            422,
            "greater than or equal to 1",
        ),
        ("post", "/v1/ask", {"json": {"question": "hi", "colour": "red"}}, 422, "Extra inputs"),
        ("post", "/v1/ask", {"json": {"question": "hi", "index": "nope"}}, 404, "does not exist"),
        (
            "post",
            "/v1/ask",
            {"json": {"question": "hi", "index": "../x"}},
            422,
            "invalid index name",
        ),
        (
            "post",
            "/v1/ask",
            {"content": b"{not json", "headers": {"content-type": "application/json"}},
            422,
            "JSON",
        ),
        (
            "post",
            "/v1/documents",
            {"content": b"{not json", "headers": {"content-type": "application/json"}},
            422,
            "Invalid JSON",
        ),
        ("post", "/v1/documents", {"json": {"text": "no id"}}, 422, "doc_id"),
        ("post", "/v1/documents", {"files": {"file": ("tool.exe", b"MZ")}}, 415, "supported types"),
        (
            "post",
            "/v1/documents",
            {"files": {"file": ("big.txt", b"x" * 5000)}},
            413,
            "at most 4096",
        ),
        (
            "post",
            "/v1/documents",
            {"files": {"file": ("bad.jsonl", b'{"text": 1}\n')}},
            422,
            "line 1",
        ),
        (
            "post",
            "/v1/documents",
            {"content": b"hello", "headers": {"content-type": "text/plain"}},
            415,
            "content type",
        ),
        ("delete", "/v1/documents/no-such-doc", {}, 404, "no-such-doc"),
        ("get", "/v1/documents?index=nope", {}, 404, "does not exist"),
        ("get", "/v1/indexes/nope", {}, 404, "does not exist"),
        (
            "post",
            "/v1/documents",
            {"files": {"file": ("m.jsonl", b'{"text": "t", "metadata": [1]}\n')}},
            422,
            "'metadata' must be an object",
        ),
        (
            "post",
            "/v1/documents",
            {"files": {"file": ("broken.pdf", b"%PDF-1.4 nonsense")}},
            422,
            "not a readable PDF",
        ),
        ("post", "/v1/ask", {"json": {"question": "hi", "seed": 2**64}}, 422, "less than"),
        (
            "post",
            "/v1/ask",
            {"json": {"question": "hi", "max_tokens": 0}},
            422,
            "greater than or equal to 1",
        ),
        (
            "post",
            "/v1/ask",
            {"json": {"question": "hi", "abstain_below": 0.9, "review_below": 0.5}},
            422,
            "abstain_below <= review_below",
        ),
        ("post", "/v1/ask", {"json": {"question": "hi", "review_below": 1.5}}, 422, "less than"),
        ("get", "/v1/no-such-route", {}, 404, "Not Found"),
        ("put", "/v1/ask", {}, 405, "Method Not Allowed"),
    ],
)
def test_bad_input_gets_a_4xx_with_a_message_and_loses_nothing(
    client: TestClient, method: str, url: str, kwargs: dict, status: int, fragment: str
) -> None:
    before = index_state(client)
    response = getattr(client, method)(url, **kwargs)
    assert response.status_code == status, response.text
    body = response.json()
    assert fragment in str(body["detail"]) and body["error"]
    assert "Traceback" not in response.text
    assert index_state(client) == before
    kept = client.post(
        "/v1/ask", json={"question": "What does a KV cache avoid recomputing?", "max_tokens": 1}
    )
    assert kept.json()["passages"][0]["doc_id"] == "kv-cache.md"


def test_a_request_without_content_length_is_refused(client: TestClient) -> None:
    def body() -> Iterator[bytes]:
        yield b'{"doc_id": "s", "text": "streamed"}'

    response = client.post(
        "/v1/documents", content=body(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 411 and "Content-Length" in response.json()["detail"]


def readiness_after_loading(http: TestClient, timeout_s: float) -> httpx2.Response:
    """``/readyz`` once the background load has ended (or the last answer after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        ready = http.get("/readyz")
        if ready.json()["status"] != "loading" or time.monotonic() > deadline:
            return ready
        time.sleep(0.1)


@pytest.mark.model
def test_model_routes_answer_503_while_loading(tmp_path: Path) -> None:
    from rag.settings import Settings

    settings = Settings(
        index_dir=tmp_path,
        data_dir=tmp_path / "data",
        model=str(tmp_path / "missing.gguf"),
        _env_file=None,
    )
    with TestClient(create_app(settings)) as http:
        ready = readiness_after_loading(http, timeout_s=10)
        assert ready.status_code == 503 and ready.json()["status"] == "failed"
        assert "missing.gguf" in ready.json()["error"]
        response = http.post("/v1/ask", json={"question": "hi"})
        assert response.status_code == 503 and "failed to load" in response.json()["detail"]
        assert http.get("/healthz").status_code == 200


def test_request_id_is_echoed_and_shared_with_the_result(client: TestClient) -> None:
    response = client.post(
        "/v1/ask",
        json={"question": "What does a KV cache avoid recomputing?", "max_tokens": 4},
        headers={"x-request-id": "trace-123"},
    )
    assert response.headers["x-request-id"] == "trace-123"
    assert response.json()["request_id"] == "trace-123"


def test_request_log_records_carry_the_servers_resources(
    fake_pipeline: Pipeline, caplog: pytest.LogCaptureFixture
) -> None:
    from engine import EngineStats

    app = create_app(pipeline=fake_pipeline)
    state = app.state.ragguard
    client = TestClient(app)
    caplog.set_level(logging.INFO, logger="ragguard.request")

    def logged(request_id: str) -> dict[str, object]:
        client.get("/healthz", headers={"x-request-id": request_id})
        for record in caplog.records:
            fields = getattr(record, "fields", {})
            if record.name == "ragguard.request" and fields.get("request_id") == request_id:
                return dict(fields)
        raise AssertionError(f"no request record of {request_id}")

    # The scripted generator is no engine of ours: the server's memory, no KV pool.
    scripted = logged("resources-scripted")
    assert isinstance(scripted["rss_bytes"], int) and scripted["rss_bytes"] > 0
    assert not {"kv_blocks_used", "kv_blocks_free"} & scripted.keys()
    stats = EngineStats(
        num_running=0,
        num_waiting=0,
        num_kv_blocks=64,
        num_kv_blocks_used=5,
        prefix_cache_hit_rate=0.0,
        num_preemptions=0,
        num_generated_tokens=0,
        generated_tokens_per_s=0.0,
    )
    state.telemetry.watch_engine(lambda: stats)
    engine = logged("resources-engine")
    assert (engine["kv_blocks_used"], engine["kv_blocks_free"]) == (5, 59)
    assert not [name for name in engine if name.startswith(("cuda", "gpu"))]  # CPU stats

    def broken() -> EngineStats:
        raise RuntimeError("stats unreadable")

    state.telemetry.engine_stats = broken
    unread = logged("resources-broken")  # the record is still written, without the figures
    assert unread["status"] == 200 and "rss_bytes" not in unread
    assert "resource fields left out" in caplog.text


def test_an_unreadable_index_is_left_out_of_the_listing(
    client: TestClient, fake_pipeline: Pipeline
) -> None:
    from rag.retrieval.index import VectorIndex

    index_dir = fake_pipeline.settings.retrieval.index_dir
    VectorIndex.create(
        index_dir / "other-model", embedding_model="bge-small", dimension=384
    ).close()
    listed = client.get("/v1/indexes")
    assert listed.status_code == 200
    assert [i["name"] for i in listed.json()] == ["demo"]
    assert client.get("/v1/indexes/other-model").status_code == 409


@pytest.mark.slow
def test_the_engine_in_its_own_process_serves_the_app(tmp_path: Path) -> None:
    from rag.settings import Settings

    settings = Settings(
        index_dir=tmp_path / "indexes",
        data_dir=tmp_path / "data",
        generator="engine-process",
        kv_cache_memory_mb=128,
        max_tokens=48,
        _env_file=None,
    )
    with TestClient(create_app(settings)) as http:
        ready = readiness_after_loading(http, timeout_s=120)
        assert ready.status_code == 200, ready.json()
        answer = http.post("/v1/ask", json={"question": "What does a KV cache avoid recomputing?"})
        assert answer.status_code == 200 and answer.json()["citations"], answer.json()
        metrics = http.get("/metrics").text
        generated = [
            line for line in metrics.splitlines() if line.startswith("ragguard:generation_tokens")
        ]
        assert generated and float(generated[0].split()[-1]) > 0
        # The child's step time and KV pool come with its stats across the pipe.
        values = {
            name: float(value)
            for name, value in (
                line.rsplit(" ", 1) for line in metrics.splitlines() if line[:1] != "#"
            )
        }
        assert values["ragguard:engine_steps_total"] > 0
        assert values["ragguard:engine_step_seconds_total"] > 0
        assert values["ragguard:kv_cache_blocks_free"] > 0
        assert http.get("/healthz").status_code == 200
        assert [p.name for p in multiprocessing.active_children()] == ["ragguard-engine"]
    # Leaving the app shut the engine down: its process is gone.
    assert multiprocessing.active_children() == []


def test_the_server_and_its_pipeline_share_one_review_store(
    settings: Settings, fake_demo_index_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lifespan opens the store (reviewers work while the model loads) and lends it to the
    pipeline it loads: an item the pipeline queues is the reviewers' at once."""
    import shutil

    from guards.review import ReviewStore
    from rag.pipeline import Pipeline
    from rag.server import app as app_module
    from tests.fakes import HashingEmbedder, ScriptedGenerator

    shutil.copytree(fake_demo_index_template, settings.retrieval.index_dir / "demo")

    def load_fakes(
        s: Settings, *, require_index: bool, reviews: ReviewStore | None, serving: bool
    ) -> Pipeline:
        return Pipeline(s, HashingEmbedder(), ScriptedGenerator(), reviews=reviews)

    monkeypatch.setattr(app_module.Pipeline, "from_settings", load_fakes)
    app = create_app(settings)
    with TestClient(app) as http:
        state = app.state.ragguard
        ready = readiness_after_loading(http, timeout_s=60)
        assert ready.json()["status"] == "ready", ready.text
        assert state.pipeline.reviews.store is state.reviews
        asked = http.post("/v1/ask", json={"question": "What is a KV cache?", "review_below": 1.0})
        assert asked.json()["decision"] == "review"
        listed = http.get("/v1/reviews").json()["items"]
        assert [i["id"] for i in listed] == [asked.json()["review_id"]]
