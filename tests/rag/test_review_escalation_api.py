"""Escalations over HTTP: an escalated item goes to the reviewer it names or to an admin, never back
to who escalated it, and the API says who escalated it to whom. The app's model does not exist:
the review queue works without it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from guards.review import NewItem
from rag.server import create_app
from rag.settings import Settings
from tests.server_state import review_store


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        index_dir=tmp_path / "indexes",
        data_dir=tmp_path / "data",
        model=str(tmp_path / "missing.gguf"),
        _env_file=None,
    )
    with TestClient(create_app(settings)) as http:
        yield http


def queued(client: TestClient, question: str = "Is it true?") -> str:
    store = review_store(client)
    return str(store.add(NewItem(question, "Yes.", confidence=0.1)).id)


def escalate(client: TestClient, item_id: str, who: dict[str, str], **body: str) -> dict:
    assert client.post(f"/v1/reviews/{item_id}/claim", headers=who).status_code == 200
    done = client.post(
        f"/v1/reviews/{item_id}/resolve", headers=who, json={"action": "escalate", **body}
    )
    assert done.status_code == 200, done.text
    return dict(done.json())


def test_with_keys_an_escalation_goes_to_the_admins_or_the_named_reviewer(
    client: TestClient,
) -> None:
    root = client.post("/v1/keys", json={"name": "root", "role": "admin"}).json()["key"]
    admin = {"authorization": f"Bearer {root}"}
    key = {}
    for name in ("ann", "bob", "carol"):
        made = client.post("/v1/keys", headers=admin, json={"name": name, "role": "reviewer"})
        key[name] = {"authorization": f"Bearer {made.json()['key']}"}
    to_admins = queued(client, "For the admins?")
    body = escalate(client, to_admins, key["ann"])
    assert body["status"] == "escalated"
    assert (body["escalated_by"], body["escalated_to"]) == ("ann", None)
    for who in ("ann", "bob"):  # the one who escalated it, and a reviewer who is not an admin
        refused = client.post(f"/v1/reviews/{to_admins}/claim", headers=key[who])
        assert refused.status_code == 403 and refused.json()["error"] == "escalated_elsewhere"
        assert client.post("/v1/reviews/next", headers=key[who]).json() is None
    assert (
        "you (ann) escalated"
        in client.post(f"/v1/reviews/{to_admins}/claim", headers=key["ann"]).json()["detail"]
    )
    taken = client.post(f"/v1/reviews/{to_admins}/claim", headers=admin).json()
    assert taken["assignee"] == "root" and taken["escalated_by"] == "ann"

    to_bob = queued(client, "For bob?")
    assert escalate(client, to_bob, key["ann"], escalate_to="bob")["escalated_to"] == "bob"
    refused = client.post(f"/v1/reviews/{to_bob}/claim", headers=key["carol"])
    assert refused.status_code == 403 and "only bob or an admin" in refused.json()["detail"]
    assert client.post("/v1/reviews/next", headers=key["bob"]).json()["id"] == to_bob
    listed = client.get("/v1/reviews", params={"status": "claimed"}, headers=admin).json()
    assert {(i["id"], i["escalated_by"], i["escalated_to"]) for i in listed["items"]} == {
        (to_admins, "ann", None),
        (to_bob, "ann", "bob"),
    }

    # A name that is no reviewer's key, the escalator's own name, or a name without escalating.
    bad = queued(client, "Bad escalations?")
    client.post(f"/v1/reviews/{bad}/claim", headers=key["ann"])
    for body, status, fragment in [
        ({"action": "escalate", "escalate_to": "nobody"}, 422, "no reviewer's key"),
        ({"action": "escalate", "escalate_to": "ann"}, 422, "not to yourself"),
        ({"action": "approve", "escalate_to": "bob"}, 422, "only 'escalate'"),
        ({"action": "escalate", "escalate_to": ""}, 422, "at least 1 character"),
    ]:
        response = client.post(f"/v1/reviews/{bad}/resolve", headers=key["ann"], json=body)
        assert response.status_code == status and fragment in str(response.json()["detail"])
    assert client.get(f"/v1/reviews/{bad}", headers=admin).json()["status"] == "claimed"


def test_without_keys_anyone_but_the_escalator_takes_it(client: TestClient) -> None:
    ann, bob = {"x-reviewer": "ann"}, {"x-reviewer": "bob"}
    item_id = queued(client)
    escalate(client, item_id, ann)
    refused = client.post(f"/v1/reviews/{item_id}/claim", headers=ann)
    assert refused.status_code == 403 and "you (ann) escalated" in refused.json()["detail"]
    assert client.post("/v1/reviews/next", headers=ann).json() is None
    taken = client.post("/v1/reviews/next", headers=bob).json()  # everyone is an admin
    assert taken["id"] == item_id and taken["assignee"] == "bob"
    released = client.post(f"/v1/reviews/{item_id}/release", headers=bob).json()
    assert released["status"] == "escalated"  # back among the escalations, still not ann's
    assert client.post(f"/v1/reviews/{item_id}/claim", headers=ann).status_code == 403
    shown = client.get(f"/v1/reviews/{item_id}", headers=bob).json()
    assert (shown["escalated_by"], shown["escalated_to"]) == ("ann", None)
    assert [a["action"] for a in shown["audit"]] == [
        "created",
        "claim",
        "escalate",
        "claim",
        "release",
    ]
