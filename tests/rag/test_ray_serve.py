"""``ragguard serve --ray`` on a local Ray instance: two API replicas over one engine replica,
questions answered through both replicas, every review item in one store, and a clean stop."""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("ray.serve")
pytestmark = pytest.mark.slow

QUESTIONS = [
    "What does a KV cache avoid recomputing?",
    "What is prefix caching?",
    "What does continuous batching do?",
    "What is self-consistency voting?",
] * 3


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_two_api_replicas_share_one_engine_and_one_review_store(
    tmp_path: Path, demo_index_template: Path
) -> None:
    shutil.copytree(demo_index_template, tmp_path / "indexes" / "demo")
    port = _free_port()
    env = {
        **os.environ,
        "RAGGUARD_INDEX_DIR": str(tmp_path / "indexes"),
        "RAGGUARD_DATA_DIR": str(tmp_path / "data"),
        "RAGGUARD_RAY_CPUS_PER_REPLICA": "0",  # three replicas on a two-core machine
        "RAGGUARD_MAX_TOKENS": "24",
        "RAGGUARD_ABSTAIN_BELOW": "0",  # none withheld, whatever its confidence
        "RAGGUARD_REVIEW_BELOW": "1.0",  # every answer is queued: each one leaves a trace
    }
    log = tmp_path / "serve.log"
    command = [sys.executable, "-m", "rag.cli", "serve", "--ray", "--api-replicas", "2"]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*command, "--port", str(port)],
            env=env,
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 400
        # Ready means both API replicas answer: the router spreads these probes over every
        # running replica, so both names turn up once both are up (a replica still loading is
        # not routed to, and a burst of questions may then all land on the other one).
        seen: set[str] = set()
        while len(seen) < 2:
            assert process.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, f"2 API replicas not ready in 400 s: {seen}"
            try:
                probe = httpx.get(f"{url}/readyz", timeout=5)
                if probe.status_code == 200:
                    seen.add(probe.headers["x-ragguard-replica"])
                    continue
            except httpx.HTTPError:
                pass
            time.sleep(1)

        def ask(question: str) -> tuple[str, str]:
            # A replica at capacity answers 429 with Retry-After (its admission control): a
            # client waits that long and asks again.
            for _ in range(60):
                response = httpx.post(f"{url}/v1/ask", json={"question": question}, timeout=300)
                if response.status_code != 429:
                    break
                time.sleep(float(response.headers["retry-after"]))
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["decision"] == "review" and body["review_id"], body
            return response.headers["x-ragguard-replica"], body["review_id"]

        with concurrent.futures.ThreadPoolExecutor(len(QUESTIONS)) as pool:
            answered = list(pool.map(ask, QUESTIONS))
        # One review store: each replica lists every item, whichever replica queued it.
        expected = {rid for _, rid in answered}
        listed_by: dict[str, set[str]] = {}
        while set(listed_by) != seen:
            assert time.monotonic() < deadline + 120, f"not listed by both replicas: {listed_by}"
            listing = httpx.get(f"{url}/v1/reviews", params={"limit": 100}, timeout=30)
            assert listing.status_code == 200, listing.text
            body = listing.json()
            assert body["total"] == len(QUESTIONS)
            listed_by[listing.headers["x-ragguard-replica"]] = {
                item["id"] for item in body["items"]
            }
        assert all(ids == expected for ids in listed_by.values()), listed_by
        # The replicas read the index; it is written where it is built.
        write = httpx.post(f"{url}/v1/documents", json={"doc_id": "x", "text": "y"}, timeout=30)
        assert write.status_code == 403 and write.json()["error"] == "read_only_index", write.text
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            assert process.wait(timeout=120) == 0, log.read_text()[-4000:]
        finally:
            if process.poll() is None:
                process.kill()
                subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "stop", "--force"])
