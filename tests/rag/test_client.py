"""rag.Client and rag.AsyncClient against a live server on 127.0.0.1 (real sockets)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from rag import AsyncClient, Client, Result
from rag.errors import (
    DocumentNotFoundError,
    IndexNotFoundError,
    InvalidInputError,
    UnsupportedFileTypeError,
)
from rag.server import create_app


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def server_url(demo_pipeline) -> Iterator[str]:  # type: ignore[no-untyped-def]
    port = free_port()
    config = uvicorn.Config(
        create_app(pipeline=demo_pipeline), host="127.0.0.1", port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def test_sync_client_round_trip(server_url: str, tmp_path: Path) -> None:
    with Client(server_url) as client:
        assert client.ready()
        result = client.ask("What does a KV cache avoid recomputing?")
        assert isinstance(result, Result)
        assert result.citations[0].doc_id == "kv-cache.md"

        note = tmp_path / "lighthouse.txt"
        note.write_text("The Hook Head lighthouse in Ireland has operated for about 800 years.")
        assert client.add_file(note)["added"] == ["lighthouse.txt"]
        assert client.add_text("t1", "Tulips bloom in April in the Netherlands.")["added"] == ["t1"]
        ids = {d["doc_id"] for d in client.list_documents(limit=1000)["documents"]}
        assert {"lighthouse.txt", "t1"} <= ids
        answer = client.ask("How long has the Hook Head lighthouse operated?", max_tokens=32)
        assert answer.citations and answer.citations[0].doc_id == "lighthouse.txt"
        client.delete_document("t1")

        with pytest.raises(DocumentNotFoundError, match="t1"):
            client.delete_document("t1")
        with pytest.raises(IndexNotFoundError, match="does not exist"):
            client.ask("anything", index="missing")
        with pytest.raises(InvalidInputError, match="question"):
            client.ask("")
        bad = tmp_path / "x.exe"
        bad.write_bytes(b"MZ")
        with pytest.raises(UnsupportedFileTypeError):
            client.add_file(bad)


def test_async_client_returns_the_same_result_type(server_url: str) -> None:
    async def run() -> tuple[Result, Result]:
        async with AsyncClient(server_url) as client:
            assert await client.ready()
            first, second = await asyncio.gather(
                client.ask("What does a KV cache avoid recomputing?", max_tokens=24),
                client.ask("Who won the 1998 football world cup final?"),
            )
            await client.add_text("a1", "Async clients share request builders.")
            assert "a1" in {
                d["doc_id"] for d in (await client.list_documents(limit=1000))["documents"]
            }
            await client.delete_document("a1")
            return first, second

    answered, abstained = asyncio.run(run())
    assert answered.citations[0].doc_id == "kv-cache.md" and not answered.abstained
    assert abstained.abstained and abstained.citations == []
