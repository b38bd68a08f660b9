"""The review API over real HTTP semantics (TestClient) with the real pipeline: the workflow,
every bad input, and API keys with roles."""

from __future__ import annotations

import csv
import io
import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient

from guards import Policy
from guards.review import NewItem
from rag.review_desk import export_format
from rag.review_desk.export_format import export_rows
from rag.server import create_app
from rag.server.auth import KeyStore, Role, check_bind
from tests.server_state import key_store, review_store

if TYPE_CHECKING:
    from rag.pipeline import Pipeline

QUESTION = "What does a KV cache avoid recomputing?"
ANN = {"x-reviewer": "ann"}
BOB = {"x-reviewer": "bob"}


@pytest.fixture
def client(fake_pipeline: Pipeline) -> Iterator[TestClient]:
    assert fake_pipeline.checker is not None  # the guards are on by default
    fake_pipeline.checker.policy = Policy(abstain_below=0.0, review_below=1.0)  # all to review
    with TestClient(create_app(pipeline=fake_pipeline)) as http:
        yield http


def queued(client: TestClient, question: str = "Is it true?") -> str:
    """An item put straight into the store (no model call): for the bad-input cases."""
    store = review_store(client)
    item = store.add(
        NewItem(
            question,
            "Yes [1].",
            passages=[{"doc_id": "d", "text": "It is true."}],
            index_name="demo",
        )
    )
    return str(item.id)


def test_a_flagged_answer_is_reviewed_end_to_end(client: TestClient) -> None:
    flagged = client.post("/v1/ask", json={"question": QUESTION, "max_tokens": 12}).json()
    assert flagged["decision"] == "review" and flagged["review_id"]
    item_id = flagged["review_id"]

    listed = client.get("/v1/reviews", params={"status": "pending"}, headers=ANN).json()
    assert listed["total"] == 1 and listed["items"][0]["id"] == item_id
    assert "is_gold" not in listed["items"][0] or listed["items"][0]["is_gold"] in (None, False)
    item = client.get(f"/v1/reviews/{item_id}", headers=ANN).json()
    assert item["question"] == QUESTION and item["answer"] == flagged["answer"]
    assert item["passages"][0]["doc_id"] == "kv-cache.md" and item["guard_results"]
    assert item["reasons"] == flagged["decision_reasons"] and not item["is_overdue"]
    assert [a["action"] for a in item["audit"]] == ["created"]

    claimed = client.post(f"/v1/reviews/{item_id}/claim", headers=ANN).json()
    assert claimed["status"] == "claimed" and claimed["assignee"] == "ann"
    edited = (
        "A KV cache keeps the keys and values of earlier tokens, so they are not recomputed [1]."
    )
    done = client.post(
        f"/v1/reviews/{item_id}/resolve",
        headers=ANN,
        json={
            "action": "edit",
            "edited_answer": edited,
            "ratings": {"relevance": 2, "fluency": 2, "usefulness": 3},
            "comment": "too short",
        },
    )
    assert done.status_code == 200, done.text
    body = done.json()
    assert body["status"] == "edited" and body["edited_answer"] == edited
    assert body["ratings"][0] == {
        **body["ratings"][0],
        "reviewer": "ann",
        "relevance": 2,
        "comment": "too short",
    }
    assert [(a["actor"], a["action"]) for a in body["audit"]] == [
        ("system", "created"),
        ("ann", "claim"),
        ("ann", "edit"),
    ]
    assert any(s for p in body["passages"] for s in p["cited_sentences"])

    again = client.post("/v1/ask", json={"question": QUESTION + "  "}).json()
    assert again["answer"] == edited and again["decision"] == "answer"
    assert (
        again["review_id"] == item_id and "approved by reviewer ann" in again["decision_reasons"][0]
    )

    stats = client.get("/v1/reviews/stats", headers=ANN).json()
    assert stats["by_status"] == {"edited": 1} and stats["reviewers"][0]["reviewer"] == "ann"
    assert set(stats["agreement"]) == {"relevance", "fluency", "usefulness"}


def test_claims_release_next_and_rating_by_a_second_reviewer(client: TestClient) -> None:
    first, second = queued(client, "one?"), queued(client, "two?")
    nxt = client.post("/v1/reviews/next", headers=ANN).json()
    assert nxt["id"] == first and nxt["assignee"] == "ann"
    assert client.post("/v1/reviews/next", headers=BOB).json()["id"] == second
    assert client.get("/v1/reviews", params={"assignee": "bob"}, headers=ANN).json()["total"] == 1
    assert client.post(f"/v1/reviews/{second}/release", headers=BOB).json()["status"] == "pending"
    client.post(
        f"/v1/reviews/{first}/resolve",
        headers=ANN,
        json={"action": "approve", "ratings": {"relevance": 3}},
    )
    rated = client.post(
        f"/v1/reviews/{first}/rate", headers=BOB, json={"ratings": {"relevance": 2}}
    )
    assert rated.status_code == 200 and len(rated.json()["ratings"]) == 2
    assert client.get("/v1/reviews/stats", headers=ANN).json()["num_multiply_rated"] == 1
    assert client.get("/v1/reviews/me", headers=BOB).json() == {"name": "bob", "role": "admin"}


def test_export_as_jsonl_and_csv(client: TestClient) -> None:
    item_id = queued(client)
    client.post(f"/v1/reviews/{item_id}/claim", headers=ANN)
    client.post(
        f"/v1/reviews/{item_id}/resolve",
        headers=ANN,
        json={"action": "reject", "comment": "wrong, see doc"},
    )
    lines = client.get("/v1/reviews/export", headers=ANN).text.splitlines()
    row = json.loads(lines[0])
    assert (
        row["id"] == item_id
        and row["status"] == "rejected"
        and row["ratings"][0]["comment"] == "wrong, see doc"
    )
    response = client.get("/v1/reviews/export", params={"format": "csv"}, headers=ANN)
    assert response.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert rows[0]["id"] == item_id and rows[0]["resolution"] == "reject"


def test_export_streams_each_item_once_while_reviewers_work(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(export_format, "_EXPORT_PAGE", 3)
    store = review_store(client)
    store.add_gold("Capital of France?", "Paris.", is_correct=True)
    for i in range(10):
        queued(client, f"q{i}?")  # and one gold item comes with them
    items = sorted(store.list_items(limit=100)[0], key=lambda i: (i.created_at, i.id))
    start_ids = [i.id for i in items]  # in export order
    assert len(start_ids) == 11

    rows = export_rows(store, None, show_gold=False)
    seen = [next(rows) for _ in range(4)]  # two pages of three read
    late = queued(client, "late?")
    for item_id, who in [(start_ids[0], ANN), (start_ids[7], BOB), (start_ids[-1], ANN)]:
        assert client.post(f"/v1/reviews/{item_id}/claim", headers=who).status_code == 200
    resolved = client.post(
        f"/v1/reviews/{start_ids[-1]}/resolve",
        headers=ANN,
        json={"action": "approve", "ratings": {"relevance": 3}},
    )
    assert resolved.status_code == 200, resolved.text
    seen += list(rows)

    counts = Counter(row["id"] for row in seen)
    assert {i: counts[i] for i in start_ids} == dict.fromkeys(start_ids, 1)
    assert counts[late] <= 1 and all("is_gold" not in row for row in seen)
    last = next(row for row in seen if row["id"] == start_ids[-1])  # read after it was resolved
    assert last["status"] == "approved" and last["ratings"][0]["relevance"] == 3
    admin_rows = list(export_rows(store, None, show_gold=True))
    assert sum(row["is_gold"] for row in admin_rows) == 1
    assert all("audit" not in row for row in admin_rows)


@pytest.mark.parametrize(
    ("setup", "request_", "status", "error", "fragment"),
    [
        ([], ("resolve", ANN, {"action": "approve"}), 409, "not_claimed", "claim it first"),
        (
            [("claim", BOB)],
            ("resolve", ANN, {"action": "approve"}),
            409,
            "claimed_by_another",
            "claimed by bob",
        ),
        (
            [("claim", ANN), ("resolve", ANN)],
            ("resolve", ANN, {"action": "approve"}),
            409,
            "already_resolved",
            "already approved by ann",
        ),
        (
            [("claim", ANN), ("resolve", ANN)],
            ("claim", BOB, {}),
            409,
            "already_resolved",
            "already approved",
        ),
        (
            [("claim", ANN)],
            ("resolve", ANN, {"action": "approve", "ratings": {"relevance": 4}}),
            422,
            "invalid_request",
            "less than or equal to 3",
        ),
        (
            [("claim", ANN)],
            ("resolve", ANN, {"action": "approve", "ratings": {"usefulness": -1}}),
            422,
            "invalid_request",
            "greater than or equal to 0",
        ),
        (
            [("claim", ANN)],
            ("resolve", ANN, {"action": "edit"}),
            422,
            "invalid_review",
            "corrected answer",
        ),
        (
            [("claim", ANN)],
            ("resolve", ANN, {"action": "publish"}),
            422,
            "invalid_request",
            "approve",
        ),
        ([], ("release", ANN, None), 409, "not_claimed", "claim it first"),
        (
            [],
            ("rate", ANN, {"ratings": {"relevance": 1}}),
            409,
            "review_conflict",
            "rate it while resolving",
        ),
    ],
)
def test_bad_review_actions_are_refused_and_change_nothing(
    client: TestClient, setup: list, request_: tuple, status: int, error: str, fragment: str
) -> None:
    item_id = queued(client)
    for action, who in setup:
        body = {"action": "approve"} if action == "resolve" else None
        assert (
            client.post(f"/v1/reviews/{item_id}/{action}", headers=who, json=body).status_code
            == 200
        )
    before = client.get(f"/v1/reviews/{item_id}", headers=ANN).json()
    action, who, body = request_
    response = client.post(f"/v1/reviews/{item_id}/{action}", headers=who, json=body)
    assert response.status_code == status, response.text
    assert response.json()["error"] == error and fragment in str(response.json()["detail"])
    after = client.get(f"/v1/reviews/{item_id}", headers=ANN).json()
    assert after == {**before, "age_s": after["age_s"]}  # nothing half-written, no audit row


def test_an_expired_claim_gets_409_and_returns_to_the_queue(client: TestClient) -> None:
    item_id = queued(client)
    client.post(f"/v1/reviews/{item_id}/claim", headers=ANN, json={"ttl_s": 0.2})
    time.sleep(0.3)
    response = client.post(
        f"/v1/reviews/{item_id}/resolve", headers=ANN, json={"action": "approve"}
    )
    assert response.status_code == 409 and response.json()["error"] == "claim_expired"
    assert client.get(f"/v1/reviews/{item_id}", headers=ANN).json()["status"] == "pending"
    assert client.post(f"/v1/reviews/{item_id}/claim", headers=BOB).json()["assignee"] == "bob"


def test_unknown_ids_are_404(client: TestClient) -> None:
    for method, path in [
        ("get", ""),
        ("post", "/claim"),
        ("post", "/release"),
        ("post", "/resolve"),
    ]:
        kwargs = {"json": {"action": "approve"}} if path == "/resolve" else {}
        response = getattr(client, method)(f"/v1/reviews/nope{path}", headers=ANN, **kwargs)
        assert response.status_code == 404 and response.json()["error"] == "review_not_found"
    assert client.get("/v1/reviews", params={"status": "lost"}, headers=ANN).status_code == 422


def test_api_keys_and_roles(client: TestClient) -> None:
    keys = key_store(client)
    # No keys: authentication is off (loopback only) and everyone is an admin.
    made = client.post("/v1/keys", json={"name": "root", "role": "admin"})
    assert made.status_code == 201 and made.json()["key"].startswith("rg_")
    admin = {"authorization": f"Bearer {made.json()['key']}"}
    app_key = client.post("/v1/keys", headers=admin, json={"name": "web", "role": "app"}).json()[
        "key"
    ]
    reviewer_key = client.post(
        "/v1/keys", headers=admin, json={"name": "ann", "role": "reviewer"}
    ).json()["key"]
    reviewer = {"authorization": f"Bearer {reviewer_key}"}
    app = {"x-api-key": app_key}
    item_id = queued(client)

    no_key = client.get("/v1/reviews")
    assert no_key.status_code == 401 and no_key.json()["error"] == "unauthenticated"
    assert no_key.headers["www-authenticate"] == "Bearer"
    assert (
        client.get("/v1/reviews", headers={"authorization": "Bearer rg_wrong"}).status_code == 401
    )
    assert client.post("/v1/ask", json={"question": QUESTION}).status_code == 401
    assert (
        client.get("/v1/reviews", headers={**reviewer, "x-reviewer": "mallory"}).status_code == 200
    )
    # The key's name is the actor, whatever X-Reviewer says.
    claimed = client.post(
        f"/v1/reviews/{item_id}/claim", headers={**reviewer, "x-reviewer": "mallory"}
    )
    assert claimed.json()["assignee"] == "ann"

    for headers, method, path, body in [
        (reviewer, "post", "/v1/documents", {"doc_id": "x", "text": "y"}),
        (reviewer, "get", "/v1/keys", None),
        (reviewer, "post", "/v1/reviews/gold", {"question": "q", "answer": "a", "correct": True}),
        (reviewer, "post", f"/v1/reviews/{item_id}/gold", None),
        (reviewer, "post", "/v1/ask", {"question": QUESTION}),
        (app, "get", "/v1/reviews", None),
        (app, "get", "/v1/documents", None),
    ]:
        response = client.request(method, path, headers=headers, json=body)
        assert response.status_code == 403, (path, response.text)
        assert (
            response.json()["error"] == "forbidden"
            and "this route needs" in response.json()["detail"]
        )

    assert (
        client.post(
            "/v1/ask", headers=app, json={"question": QUESTION, "max_tokens": 4}
        ).status_code
        == 200
    )
    assert client.get("/v1/documents", headers=admin).status_code == 200
    assert client.get("/v1/reviews", headers=admin).json()["items"][0]["is_gold"] is False
    # An item made gold: its audit trail says so to admins, not to reviewers.
    client.post(f"/v1/reviews/{item_id}/resolve", headers=reviewer, json={"action": "approve"})
    assert client.post(f"/v1/reviews/{item_id}/gold", headers=admin).status_code == 201
    seen_by = {
        who: [e["action"] for e in client.get(f"/v1/reviews/{item_id}", headers=h).json()["audit"]]
        for who, h in (("admin", admin), ("reviewer", reviewer))
    }
    assert "made_gold" in seen_by["admin"] and "made_gold" not in seen_by["reviewer"]
    assert seen_by["reviewer"] == [a for a in seen_by["admin"] if a != "made_gold"]
    listed = client.get("/v1/keys", headers=admin).json()
    assert {k["name"]: k["role"] for k in listed} == {
        "ann": "reviewer",
        "root": "admin",
        "web": "app",
    }
    assert "rg_" not in json.dumps(listed)
    assert client.delete("/v1/keys/web", headers=admin).status_code == 204
    assert client.post("/v1/ask", headers=app, json={"question": QUESTION}).status_code == 401
    assert client.get("/healthz").status_code == 200 and client.get("/review").status_code == 200
    assert keys.verify(reviewer_key) is not None and keys.verify(reviewer_key[:-1]) is None
    # Revoking every key does not switch authentication off while the server runs.
    for name in ("ann", "root"):
        assert client.delete(f"/v1/keys/{name}", headers=admin).status_code in (204, 401)
    assert keys.list_keys() == [] and keys.is_enabled
    assert client.get("/v1/reviews").status_code == 401


def test_without_keys_web_pages_elsewhere_cannot_act_as_admin(client: TestClient) -> None:
    item_id = queued(client)
    forged = client.post(f"/v1/reviews/{item_id}/claim", headers={"sec-fetch-site": "cross-site"})
    assert forged.status_code == 403 and "other web sites" in forged.json()["detail"]
    rebound = client.get("/v1/reviews", headers={"host": "attacker.example:8000"})
    assert rebound.status_code == 403 and "addressed to localhost" in rebound.json()["detail"]
    page = {"sec-fetch-site": "same-origin", "host": "127.0.0.1:8000"}
    assert client.post(f"/v1/reviews/{item_id}/claim", headers=page).status_code == 200
    assert client.get("/v1/reviews", headers={"host": "[::1]:8000"}).status_code == 200
    assert client.get("/v1/reviews", params={"offset": 10**30}).status_code == 422
    served = client.get("/review")  # the page runs only its own script
    assert "script-src 'self'" in served.headers["content-security-policy"]


def test_serving_beyond_loopback_needs_keys(tmp_path: Path) -> None:
    keys = KeyStore(tmp_path / "keys.sqlite")
    assert "loopback only" in check_bind("127.0.0.1", keys)
    assert "loopback only" in check_bind("::1", keys)
    with pytest.raises(Exception, match="refusing to listen on 0.0.0.0 without API keys"):
        check_bind("0.0.0.0", keys)
    keys.create("root", Role.ADMIN)
    assert check_bind("0.0.0.0", keys) == "API keys required"
    keys.close()
    hashed = tmp_path / "keys.txt"
    hashed.write_text("# name role sha256\nops admin " + "ab" * 32 + "\n")
    from_file = KeyStore(tmp_path / "other.sqlite", hashed)
    assert from_file.is_enabled and from_file.list_keys()[0].name == "ops"
    from_file.close()


def test_an_admin_makes_a_resolved_item_gold(client: TestClient) -> None:
    item_id = queued(client, "Does the KV cache store keys?")
    pending = client.post(f"/v1/reviews/{item_id}/gold", headers=ANN)
    assert pending.status_code == 409 and "only an approved, rejected or edited" in pending.text
    client.post(f"/v1/reviews/{item_id}/claim", headers=ANN)
    client.post(f"/v1/reviews/{item_id}/resolve", headers=ANN, json={"action": "reject"})
    made = client.post(f"/v1/reviews/{item_id}/gold", headers=ANN)
    assert made.status_code == 201
    again = client.post(f"/v1/reviews/{item_id}/gold", headers=ANN)
    assert again.status_code == 201 and again.json() == made.json()  # the same gold item
    audit = client.get(f"/v1/reviews/{item_id}", headers=ANN).json()["audit"]
    assert [e["action"] for e in audit].count("made_gold") == 1  # recorded once
    missing = client.post("/v1/reviews/nope/gold", headers=ANN)
    assert missing.status_code == 404


def test_resolved_items_are_handed_out_for_more_ratings(client: TestClient) -> None:
    store = review_store(client)
    store.min_ratings = 2
    item_id = queued(client, "Is the KV cache on the GPU?")
    assert client.post("/v1/reviews/next-to-rate", headers=BOB).json() is None  # not resolved
    client.post(f"/v1/reviews/{item_id}/claim", headers=ANN)
    resolved = client.post(
        f"/v1/reviews/{item_id}/resolve",
        headers=ANN,
        json={"action": "approve", "ratings": {"relevance": 3}},
    )
    assert resolved.status_code == 200
    assert client.get("/v1/reviews/stats", headers=ANN).json()["num_needing_ratings"] == 1
    assert client.post("/v1/reviews/next-to-rate", headers=ANN).json() is None  # her own
    handed = client.post("/v1/reviews/next-to-rate", headers=BOB).json()
    assert handed["id"] == item_id and [r["reviewer"] for r in handed["ratings"]] == ["ann"]
    rated = client.post(
        f"/v1/reviews/{item_id}/rate", headers=BOB, json={"ratings": {"relevance": 2}}
    )
    assert rated.status_code == 200
    assert client.post("/v1/reviews/next-to-rate", headers=BOB).json() is None
    stats = client.get("/v1/reviews/stats", headers=ANN).json()
    assert stats["num_needing_ratings"] == 0 and stats["num_multiply_rated"] == 1
