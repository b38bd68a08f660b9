"""Who the server answers without API keys, and what ``/readyz`` tells whom.

The app is built from settings whose model does not exist: it fails to load in the background,
and everything here (keys, the review queue, readiness) works without it.
"""

from __future__ import annotations

import logging
import os
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
from fastapi.testclient import TestClient

from guards.review import NewItem
from rag.server import create_app
from rag.settings import Settings
from tests.server_state import review_store

if TYPE_CHECKING:
    import httpx2  # starlette's TestClient is an httpx2.Client

ROOT = Path(__file__).resolve().parents[2]
EVIL = {"origin": "http://evil.example"}


def settings_in(root: Path) -> Settings:
    return Settings(
        index_dir=root / "indexes",
        data_dir=root / "data",
        model=str(root / "missing.gguf"),
        _env_file=None,
    )


@pytest.fixture
def app_settings(tmp_path: Path) -> Settings:
    return settings_in(tmp_path)


@pytest.fixture
def client(app_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(app_settings)) as http:
        yield http


def queued(client: TestClient) -> str:
    store = review_store(client)
    return str(store.add(NewItem("Is it true?", "Yes.")).id)


def wait_until_failed(
    http: TestClient | httpx.Client, headers: dict[str, str]
) -> httpx.Response | httpx2.Response:
    for _ in range(200):
        ready = http.get("/readyz", headers=headers)
        if ready.json()["status"] != "loading":
            return ready
        time.sleep(0.05)
    raise AssertionError("the model never finished failing to load")


def test_without_keys_a_page_on_another_origin_cannot_act(client: TestClient) -> None:
    item_id = queued(client)
    upload = client.post("/v1/documents", files={"file": ("x.txt", b"hi")}, headers=EVIL)
    assert upload.status_code == 403 and "Origin: http://evil.example" in upload.json()["detail"]
    assert client.delete("/v1/documents/x", headers=EVIL).status_code == 403
    for origin in ("null", "http://localhost:8000", "http://testserver.evil.example", "file://"):
        claim = client.post(f"/v1/reviews/{item_id}/claim", headers={"origin": origin})
        assert claim.status_code == 403, origin
        assert "other web sites" in claim.json()["detail"]
    assert client.get(f"/v1/reviews/{item_id}").json()["status"] == "pending"  # nothing done
    # The review page itself: its Origin is the server's, as the Host header names it.
    for origin, host in [
        ("http://testserver", "testserver"),
        ("http://127.0.0.1:8000", "127.0.0.1:8000"),
        ("http://[::1]:8000", "[::1]:8000"),
        ("http://localhost", "localhost:80"),
    ]:
        mine = client.get("/v1/reviews", headers={"origin": origin, "host": host})
        assert mine.status_code == 200, (origin, host)
    same = client.post(f"/v1/reviews/{item_id}/claim", headers={"origin": "http://testserver"})
    assert same.status_code == 200 and same.json()["status"] == "claimed"


def test_without_keys_only_local_clients_are_served(app_settings: Settings) -> None:
    app = create_app(app_settings)
    with TestClient(app, client=("192.0.2.7", 40000)) as remote:
        refused = remote.get("/v1/reviews", headers={"host": "localhost"})
        assert refused.status_code == 403
        assert "only clients on this machine" in refused.json()["detail"]
        assert remote.post("/v1/keys", json={"name": "x", "role": "admin"}).status_code == 403
        assert wait_until_failed(remote, {}).json() == {"status": "failed"}  # no details
        assert remote.get("/healthz").status_code == 200
    for local in ("127.0.0.1", "::1", "::ffff:127.0.0.1"):
        with TestClient(app, client=(local, 40000)) as http:
            assert http.get("/v1/reviews").status_code == 200, local


def test_the_app_says_loudly_when_authentication_is_off(
    app_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.INFO, logger="rag.server.auth"),
        TestClient(create_app(app_settings)),
    ):
        pass
    loud = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert loud and "AUTHENTICATION IS OFF" in loud[0].getMessage()
    assert "loopback" in loud[0].getMessage()


@pytest.mark.model
def test_readiness_details_need_a_valid_key(client: TestClient) -> None:
    local = wait_until_failed(client, {}).json()  # no keys, a local caller: the details
    assert local["status"] == "failed" and "missing.gguf" in local["error"]
    admin = client.post("/v1/keys", json={"name": "root", "role": "admin"}).json()["key"]
    app_key = client.post(
        "/v1/keys", headers={"x-api-key": admin}, json={"name": "web", "role": "app"}
    ).json()["key"]
    anonymous = client.get("/readyz")
    assert anonymous.status_code == 503 and anonymous.json() == {"status": "failed"}
    assert client.get("/readyz", headers={"x-api-key": "rg_wrong"}).json() == {"status": "failed"}
    for key in (admin, app_key):
        detailed = client.get("/readyz", headers={"authorization": f"Bearer {key}"})
        assert detailed.status_code == 503 and "missing.gguf" in detailed.json()["error"]


def _non_loopback_address() -> str | None:
    """One of this machine's own addresses that is not loopback, if it has one."""
    if shutil.which("hostname") is None:
        return None
    found = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False)
    return next((a for a in found.stdout.split() if "." in a and a != "127.0.0.1"), None)


def test_a_server_bound_beyond_loopback_by_hand_serves_only_local_clients(
    tmp_path: Path,
) -> None:
    """``uvicorn --factory rag.server:create_app --host 0.0.0.0`` skips ``ragguard serve``'s
    check; the app refuses callers from other addresses itself."""
    address = _non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        port = sock.getsockname()[1]
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RAGGUARD_DATA_DIR": str(tmp_path / "data"),
        "RAGGUARD_INDEX_DIR": str(tmp_path / "indexes"),
        "RAGGUARD_MODEL": str(tmp_path / "missing.gguf"),
    }
    command = [sys.executable, "-m", "uvicorn", "--factory", "rag.server:create_app"]
    server = subprocess.Popen(
        [*command, "--host", "0.0.0.0", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        local = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
        for _ in range(300):
            try:
                if local.get("/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        assert local.get("/v1/reviews").status_code == 200
        # From the network, even with a Host header that names localhost.
        remote = httpx.Client(base_url=f"http://{address}:{port}", timeout=10)
        refused = remote.get("/v1/reviews", headers={"host": f"localhost:{port}"})
        assert refused.status_code == 403, refused.text
        assert f"not {address}" in refused.json()["detail"]
        assert set(remote.get("/readyz").json()) == {"status"}
    finally:
        server.terminate()
        _, log = server.communicate(timeout=30)
    assert "AUTHENTICATION IS OFF" in log
