"""A scripted OpenAI-compatible completions server (FastAPI) for the remote generator's tests:
it answers the failures it is given first, then streams ``WORDS`` as server-sent events with
log-probabilities and a usage chunk, as vLLM does.

As a process of its own (``python -m tests.scripted_openai --port N --loading-s S``) it answers
503 to everything for its first S seconds, as a server loading its model does."""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

WORDS = ["Paris", " is", " the", " capital", "."]


class Script:
    """What the scripted server answers: ``failures`` (status, headers) first, then a stream."""

    def __init__(self) -> None:
        self.failures: list[tuple[int, dict[str, str]]] = []
        self.bodies: list[dict[str, Any]] = []
        self.words = WORDS
        self.finish = "stop"
        self.delay_s = 0.0
        self.sent = 0
        """Chunks streamed so far."""
        self.models_unavailable = 0
        """Answer 503 to this many more model-list requests (a server still loading)."""
        self.loading_until = 0.0
        """Answer 503 to everything until this ``time.monotonic()``."""
        self.model_lists = 0
        """Model-list requests answered so far (the 503s among them)."""


def scripted_app(script: Script) -> FastAPI:
    app = FastAPI()

    def loading() -> JSONResponse:
        error = {"error": {"message": "the model is loading", "type": "x", "code": 503}}
        return JSONResponse(error, status_code=503)

    @app.get("/v1/models", response_model=None)
    async def models() -> Any:
        script.model_lists += 1
        if script.models_unavailable > 0 or time.monotonic() < script.loading_until:
            script.models_unavailable = max(0, script.models_unavailable - 1)
            return loading()
        return {"object": "list", "data": [{"id": "scripted", "max_model_len": 512}]}

    @app.post("/v1/completions", response_model=None)
    async def completions(request: Request) -> Any:
        if time.monotonic() < script.loading_until:
            return loading()
        body = await request.json()
        script.bodies.append(body)
        if script.failures:
            status, headers = script.failures.pop(0)
            error = {"error": {"message": f"scripted {status}", "type": "x", "code": status}}
            return JSONResponse(error, status_code=status, headers=headers)

        async def events() -> AsyncIterator[str]:
            for n in range(body["n"]):
                for i, word in enumerate(script.words):
                    last = i == len(script.words) - 1
                    choice = {
                        "index": n,
                        "text": word,
                        "logprobs": {
                            "tokens": [word],
                            "token_logprobs": [-0.5],
                            "top_logprobs": [{word: -0.5, " x": -2.0}],
                            "text_offset": [0],
                        },
                        "finish_reason": script.finish if last else None,
                    }
                    yield f"data: {json.dumps({'choices': [choice]})}\n\n"
                    script.sent += 1
                    await asyncio.sleep(script.delay_s)
            usage = {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}
            yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def free_port() -> int:
    """A loopback port nothing listens on (yet)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
    """Poll ``condition`` until it holds; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(0.05)


class ScriptedProcess:
    """The scripted server as a process of its own on a fixed port, so that a test can start it
    late, kill it (SIGKILL) and start it again where its clients expect it."""

    def __init__(self, port: int | None = None):
        port = free_port() if port is None else port
        self.port = port
        self.url = f"http://127.0.0.1:{port}/v1"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, loading_s: float = 0.0) -> None:
        command = [sys.executable, "-m", "tests.scripted_openai", "--port", str(self.port)]
        root = Path(__file__).resolve().parents[1]
        self.process = subprocess.Popen([*command, "--loading-s", str(loading_s)], cwd=root)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--loading-s", type=float, default=0.0)
    args = parser.parse_args()
    script = Script()
    script.loading_until = time.monotonic() + args.loading_s
    uvicorn.run(scripted_app(script), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
