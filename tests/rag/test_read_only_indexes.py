"""Indexes served read-only (``RAGGUARD_READ_ONLY_INDEXES``, always on in Ray Serve's API
replicas): questions are answered, every write is a 403 ``read_only_index`` that changes nothing,
and an index written by another process is followed (real FAISS and SQLite; the fake models)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rag.errors import ReadOnlyIndexError
from rag.pipeline import Pipeline
from rag.retrieval.collection import CollectionRegistry
from rag.retrieval.documents import Document
from rag.server import create_app
from rag.settings import Settings
from tests.fakes import HashingEmbedder, ScriptedGenerator


@pytest.fixture
def read_only(tmp_path: Path, fake_demo_index_template: Path) -> Iterator[Pipeline]:
    settings = Settings(
        index_dir=tmp_path / "indexes",
        data_dir=tmp_path / "data",
        read_only_indexes=True,
        _env_file=None,
    )
    shutil.copytree(fake_demo_index_template, settings.retrieval.index_dir / "demo")
    pipeline = Pipeline(settings, HashingEmbedder(), ScriptedGenerator())
    yield pipeline
    pipeline.close()


def test_questions_are_answered_and_writes_are_refused(read_only: Pipeline) -> None:
    with TestClient(create_app(pipeline=read_only)) as http:
        before = http.get("/v1/documents", params={"limit": 1000}).json()
        asked = http.post("/v1/ask", json={"question": "What does a KV cache store?"})
        assert asked.status_code == 200 and asked.json()["passages"]

        added = http.post("/v1/documents", json={"doc_id": "new", "text": "A new fact."})
        doc_id = before["documents"][0]["doc_id"]
        deleted = http.delete(f"/v1/documents/{doc_id}")
        created = http.post(
            "/v1/documents", params={"index": "fresh"}, json={"doc_id": "a", "text": "b"}
        )
        for response in (added, deleted, created):
            assert response.status_code == 403, response.text
            assert response.json()["error"] == "read_only_index"
        assert "ragguard ingest" in added.json()["detail"]

        after = http.get("/v1/documents", params={"limit": 1000}).json()
        assert after == before
        assert [i["name"] for i in http.get("/v1/indexes").json()] == ["demo"]


def test_a_read_only_reader_follows_what_a_writer_commits(read_only: Pipeline) -> None:
    reader = read_only.collections.get("demo")
    with pytest.raises(ReadOnlyIndexError):
        reader.ingest([Document("x", "Paged attention stores keys in fixed-size blocks.")])
    writer = CollectionRegistry(read_only.settings.retrieval.index_dir, HashingEmbedder())
    try:
        writer.get("demo").ingest([Document("lanterns", "The tenth lantern hangs by door 3.")])
    finally:
        writer.close()
    found = reader.search("tenth lantern door", 3)
    assert found and found[0].chunk.doc_id == "lanterns"
    assert not read_only.settings.retrieval.index_dir.joinpath("fresh").exists()


def test_the_setting_governs_serving_not_the_cli_that_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rag.cli import main
    from rag.retrieval import embed

    monkeypatch.setattr(embed, "Embedder", lambda *a, **kw: HashingEmbedder())
    monkeypatch.setenv("RAGGUARD_READ_ONLY_INDEXES", "true")
    monkeypatch.setenv("RAGGUARD_INDEX_DIR", str(tmp_path / "indexes"))
    (tmp_path / "notes.md").write_text("The tenth lantern hangs by door 3.")
    assert main(["ingest", str(tmp_path / "notes.md"), "--index", "kb", "--quiet"]) == 0
    assert "1 added" in capsys.readouterr().out
    assert Settings(_env_file=None).retrieval.read_only_indexes  # still set for the server
