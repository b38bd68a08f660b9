"""rag.Client and rag.AsyncClient against a live server on 127.0.0.1 (real sockets), and the
asynchronous review calls through the app itself."""

from __future__ import annotations

import asyncio
import csv
import inspect
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from fastapi.testclient import TestClient

from guards.review import NewItem
from rag import AsyncClient, Client, Result
from rag.errors import (
    ConflictError,
    DocumentNotFoundError,
    IndexNotFoundError,
    InvalidInputError,
    RagGuardError,
    UnsupportedFileTypeError,
)
from rag.server import create_app

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from rag.pipeline import Pipeline


@pytest.fixture
def server_url(demo_pipeline: Pipeline, live_server: Callable[[ASGIApp], str]) -> str:
    return str(live_server(create_app(pipeline=demo_pipeline)))


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


REVIEW_METHODS = [
    "list_reviews",
    "get_review",
    "claim_review",
    "release_review",
    "resolve_review",
    "export_reviews",
]


@pytest.mark.parametrize("name", REVIEW_METHODS)
def test_async_review_methods_have_the_sync_signatures(name: str) -> None:
    async_method = getattr(AsyncClient, name)
    assert inspect.iscoroutinefunction(async_method)
    assert inspect.signature(async_method) == inspect.signature(getattr(Client, name))


def test_async_client_reviews_through_the_app(demo_pipeline: Pipeline) -> None:
    app = create_app(pipeline=demo_pipeline)
    with TestClient(app):  # runs the lifespan, which opens the review store
        store = app.state.ragguard.reviews
        first, second = (
            store.add(
                NewItem(
                    q, "Yes [1].", passages=[{"doc_id": "d", "text": "Yes."}], index_name="demo"
                )
            ).id
            for q in ("one?", "two?")
        )

        async def run() -> tuple[str, str]:
            transport = httpx.ASGITransport(app=app)
            async with (
                AsyncClient("http://127.0.0.1", reviewer="ann", transport=transport) as ann,
                AsyncClient("http://127.0.0.1", reviewer="bob", transport=transport) as bob,
            ):
                claimed = await ann.claim_review()
                assert claimed is not None and claimed["id"] == first
                assert claimed["assignee"] == "ann"
                taken = await bob.claim_review(second)
                assert taken is not None and taken["assignee"] == "bob"
                with pytest.raises(ConflictError, match="claimed by bob") as conflict:
                    await ann.resolve_review(second, "approve")
                assert conflict.value.error_type == "claimed_by_another"
                assert conflict.value.status_code == 409

                done = await ann.resolve_review(
                    first, "approve", ratings={"relevance": 3}, comment="fine"
                )
                assert done["status"] == "approved" and done["ratings"][0]["comment"] == "fine"
                assert (await bob.release_review(second))["status"] == "pending"
                assert (await ann.claim_review(second) or {})["assignee"] == "ann"
                edited = await ann.resolve_review(second, "edit", edited_answer="No [1].")
                assert edited["status"] == "edited" and edited["edited_answer"] == "No [1]."
                audit = (await bob.get_review(second))["audit"]
                assert [(a["actor"], a["action"]) for a in audit][-1] == ("ann", "edit")
                listed = await bob.list_reviews(status="approved", limit=10, reason=None)
                assert [i["id"] for i in listed["items"]] == [first]
                assert await bob.claim_review() is None  # nothing left to claim
                return await ann.export_reviews(), await ann.export_reviews(
                    format="csv", status="edited"
                )

        jsonl, csv_text = asyncio.run(run())
    rows = [json.loads(line) for line in jsonl.splitlines()]
    assert {r["id"]: r["status"] for r in rows} == {first: "approved", second: "edited"}
    assert next(r for r in rows if r["id"] == first)["ratings"][0]["relevance"] == 3
    table = list(csv.DictReader(io.StringIO(csv_text)))
    assert [(r["id"], r["edited_answer"]) for r in table] == [(second, "No [1].")]


def test_the_sdk_escalates_to_a_named_reviewer(demo_pipeline: Pipeline) -> None:
    app = create_app(pipeline=demo_pipeline)
    with TestClient(app):
        item = app.state.ragguard.reviews.add(NewItem("three?", "Maybe.", index_name="demo")).id

        async def run() -> None:
            transport = httpx.ASGITransport(app=app)
            async with (
                AsyncClient("http://127.0.0.1", reviewer="ann", transport=transport) as ann,
                AsyncClient("http://127.0.0.1", reviewer="bob", transport=transport) as bob,
            ):
                await ann.claim_review(item)
                sent = await ann.resolve_review(item, "escalate", escalate_to="bob")
                assert sent["escalated_by"] == "ann" and sent["escalated_to"] == "bob"
                with pytest.raises(RagGuardError, match="escalated"):
                    await ann.claim_review(item)
                assert (await bob.claim_review(item) or {})["assignee"] == "bob"
                assert (await bob.get_review(item))["escalated_to"] == "bob"

        asyncio.run(run())
