"""`ragguard serve` as a real process: its structured request logs, and shutdown on SIGTERM."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

SECRET_QUESTION = "What does a KV cache store? (marker: plum-ostrich-4711)"


@dataclass
class Served:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def records(self) -> list[dict[str, Any]]:
        """The JSON log lines written so far (other lines, e.g. the banner, skipped)."""
        found = []
        for line in self.log.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("{"):
                found.append(json.loads(line))
        return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def serve(tmp_path: Path, demo_index_template: Path) -> Iterator[Any]:
    """``serve(**env)``: start ``ragguard serve`` over a copy of the demo index; wait until
    ready. Killed after the test if still running."""
    started: list[Served] = []

    def start(headers: dict[str, str] | None = None, **env: str) -> Served:
        shutil.copytree(demo_index_template, tmp_path / "indexes" / "demo")
        port = _free_port()
        log = tmp_path / "server.log"
        environ = {
            **os.environ,
            "RAGGUARD_DATA_DIR": str(tmp_path / "data"),
            "RAGGUARD_INDEX_DIR": str(tmp_path / "indexes"),
            "RAGGUARD_MAX_TOKENS": "24",
            **env,
        }
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "rag.cli", "serve", "--port", str(port)],
                env=environ,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=tmp_path,
            )
        served = Served(f"http://127.0.0.1:{port}", process, log)
        started.append(served)
        deadline = time.monotonic() + 300
        while True:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the server was not ready in 300 s"
            try:
                if httpx.get(f"{served.url}/readyz", headers=headers, timeout=5).status_code == 200:
                    return served
            except httpx.TransportError:
                pass
            time.sleep(0.2)

    yield start
    for served in started:
        if served.process.poll() is None:
            served.process.kill()
            served.process.wait(timeout=30)


def _create_key(tmp_path: Path) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "rag.cli", "keys", "create", "logtest", "--role", "admin"],
        env={**os.environ, "RAGGUARD_DATA_DIR": str(tmp_path / "data")},
        capture_output=True,
        text=True,
        check=True,
    )
    key = next(word for word in out.stdout.split() if word.startswith("rg_"))
    return key


def _stop(
    served: Served, timeout_s: float = 60, meanwhile: threading.Thread | None = None
) -> float:
    """SIGTERM (then start ``meanwhile``); the seconds until the process had exited."""
    sent = time.monotonic()
    served.process.send_signal(signal.SIGTERM)
    if meanwhile is not None:
        meanwhile.start()
    served.process.wait(timeout=timeout_s)
    if meanwhile is not None:
        meanwhile.join(timeout=30)
    return time.monotonic() - sent


def _sequences_running(served: Served) -> float:
    metrics = httpx.get(f"{served.url}/metrics", timeout=10).text
    line = next(x for x in metrics.splitlines() if x.startswith("ragguard:num_sequences_running"))
    return float(line.split()[-1])


def _probe_until_exit(served: Served, probes: list[tuple[str, float]]) -> None:
    """``GET /healthz`` every 0.2 s until the process exits: (status or how it failed, seconds)."""
    while served.process.poll() is None:
        started = time.monotonic()
        try:
            outcome = str(httpx.get(f"{served.url}/healthz", timeout=10).status_code)
        except httpx.ConnectError:
            outcome = "refused"
        except httpx.TransportError:
            outcome = "closed"  # accepted as the listener closed, then dropped
        probes.append((outcome, time.monotonic() - started))
        time.sleep(0.2)


@pytest.mark.slow  # CLI subprocesses, 30-50 s each: the default tier stays under 10 minutes
def test_request_logs_are_json_records_without_keys_or_question_text(
    serve: Any, tmp_path: Path
) -> None:
    key = _create_key(tmp_path)
    auth = {"Authorization": f"Bearer {key}"}
    served = serve(headers=auth)
    answer = httpx.post(
        f"{served.url}/v1/ask",
        json={"question": SECRET_QUESTION, "seed": 3},
        headers={**auth, "X-Request-ID": "log-test-ask"},
        timeout=300,
    )
    assert answer.status_code == 200, answer.text
    wrong = httpx.get(
        f"{served.url}/v1/documents", headers={"X-API-Key": key + "x", "X-Request-ID": "log-401"}
    )
    assert wrong.status_code == 401
    assert _stop(served) < 60

    text = served.log.read_text(encoding="utf-8")
    assert key not in text and key[3:20] not in text
    assert "plum-ostrich" not in text, "question text reached the log"
    assert answer.json()["answer"][:40] not in text, "answer text reached the log"
    records = served.records()
    assert records, text
    ask = next(r for r in records if r.get("request_id") == "log-test-ask")
    assert ask["event"] == "request" and ask["route"] == "/v1/ask" and ask["status"] == 200
    assert ask["method"] == "POST" and ask["latency_ms"] > 0
    assert ask["decision"] == answer.json()["decision"]
    assert ask["index"] == "demo" and ask["seed"] == 3 and ask["max_tokens"] == 24
    assert ask["temperature"] is not None and ask["top_k"] >= 1
    assert ask["question_chars"] == len(SECRET_QUESTION)
    assert ask["completion_tokens"] == answer.json()["usage"]["completion_tokens"]
    # What the server held as the answer went out: its memory, the model's weights in it, and
    # the engine's KV pool.
    assert ask["rss_bytes"] > 100 << 20
    assert ask["kv_blocks_used"] >= 0 and ask["kv_blocks_free"] > 0
    refused = next(r for r in records if r.get("request_id") == "log-401")
    assert refused["status"] == 401 and refused["route"] == "/v1/documents"
    assert all({"time", "level", "logger", "message"} <= r.keys() for r in records)


@pytest.mark.slow  # 31 s: the default tier stays under 10 minutes
def test_sigterm_lets_streams_finish_within_the_grace_period_and_aborts_the_rest(
    serve: Any,
) -> None:
    grace_s = 15
    # A fixed limit: the adaptive one starts at two questions, and three run at once here.
    served = serve(RAGGUARD_SHUTDOWN_GRACE_S=str(grace_s), RAGGUARD_ADAPTIVE_CONCURRENCY="false")
    model = httpx.get(f"{served.url}/v1/models").json()["data"][0]["id"]
    streams = {"long": 4000, "short": 48}  # completion tokens; ignore_eos makes them exact
    chunks: dict[str, list[str]] = {name: [] for name in streams}
    started = {name: threading.Event() for name in streams}

    def stream(name: str) -> None:
        body = {"model": model, "prompt": "Once upon a time", "max_tokens": streams[name]}
        body |= {"ignore_eos": True, "stream": True, "seed": 1}
        try:
            with httpx.stream("POST", f"{served.url}/v1/completions", json=body, timeout=300) as r:
                for line in r.iter_lines():
                    if line.startswith("data:"):
                        chunks[name].append(line[5:].strip())
                        started[name].set()
        except httpx.HTTPError:
            chunks[name].append("closed")  # the server went away mid-stream
        finally:
            started[name].set()

    plain: list[str] = []  # a long completion that is not streamed: aborted at the end too

    def complete() -> None:
        body = {"model": model, "prompt": "Once upon a time", "max_tokens": 4000, "seed": 2}
        try:
            plain.append(
                str(
                    httpx.post(
                        f"{served.url}/v1/completions",
                        json=body | {"ignore_eos": True},
                        timeout=300,
                    ).status_code
                )
            )
        except httpx.HTTPError:
            plain.append("closed")

    # The plain completion first, in the engine before the streams start; then the long stream,
    # so that all are in flight when the signal comes; the signal goes as soon as the short
    # stream has sent its first token. On a busy machine the short one may still finish before
    # the signal lands: that is allowed, it must end with [DONE] anyway.
    readers = [threading.Thread(target=complete, daemon=True)]
    readers[0].start()
    deadline = time.monotonic() + 300
    while _sequences_running(served) < 1:
        assert time.monotonic() < deadline and not plain, f"the plain completion never ran: {plain}"
        time.sleep(0.1)
    readers += [threading.Thread(target=stream, args=(n,), daemon=True) for n in streams]
    for reader, name in zip(readers[1:], streams, strict=True):
        reader.start()
        assert started[name].wait(timeout=300), f"the {name} stream never started"
    probes: list[tuple[str, float]] = []
    stopping = threading.Thread(target=_probe_until_exit, args=(served, probes), daemon=True)
    took_s = _stop(served, timeout_s=grace_s + 120, meanwhile=stopping)
    # A probe during the grace period is answered or refused at once, never left hanging: the
    # listener closes on the signal while the streams still run.
    assert probes and all(latency < 5 for _, latency in probes), probes
    assert {outcome for outcome, _ in probes} <= {"200", "refused", "closed"}, probes
    for reader in readers:
        reader.join(timeout=30)
        assert not reader.is_alive(), "a stream did not end when the server stopped"
    # uvicorn re-raises the signal once it has shut down cleanly.
    assert served.process.returncode in (0, -signal.SIGTERM), served.log.read_text()
    assert chunks["short"][-1] == "[DONE]", "the short stream was not let finish"
    assert "[DONE]" not in chunks["long"], "a 4,000-token completion finished in the grace?"
    assert plain and plain[0] != "200", "a 4,000-token completion finished in the grace?"
    # The long stream had the whole grace period, then was cancelled; unloading follows.
    assert grace_s <= took_s < grace_s + 60, f"exit took {took_s:.1f} s"
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{served.url}/healthz", timeout=5)
    logged = [r for r in served.records() if r.get("route") == "/v1/completions"]
    assert {48, 4000} <= {r["max_tokens"] for r in logged}, served.log.read_text()


def test_log_text_setting_puts_question_and_answer_into_the_request_record(
    demo_pipeline: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from fastapi.testclient import TestClient

    from rag.server import create_app

    demo_pipeline.settings.logging.log_text = True
    caplog.set_level(logging.INFO, logger="ragguard.request")
    with TestClient(create_app(pipeline=demo_pipeline)) as client:
        answer = client.post("/v1/ask", json={"question": SECRET_QUESTION, "max_tokens": 8})
        assert answer.status_code == 200, answer.text
    records = [getattr(r, "fields", {}) for r in caplog.records if r.name == "ragguard.request"]
    ask = next(f for f in records if f.get("route") == "/v1/ask")
    assert ask["question"] == SECRET_QUESTION
    assert ask["answer"] == answer.json()["answer"]
    assert ask["request_id"] == answer.headers["x-request-id"]
