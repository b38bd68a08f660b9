"""A scripted OpenAI-compatible completions server (FastAPI) for the remote generator's tests:
it answers the failures it is given first, then streams ``WORDS`` as server-sent events with
log-probabilities and a usage chunk, as vLLM does."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
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


def scripted_app(script: Script) -> FastAPI:
    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": "scripted", "max_model_len": 512}]}

    @app.post("/v1/completions", response_model=None)
    async def completions(request: Request) -> Any:
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
