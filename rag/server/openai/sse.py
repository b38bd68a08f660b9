"""Serialising responses and server-sent chunks as OpenAI clients read them."""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sse_starlette import ServerSentEvent


def dump(model: BaseModel) -> dict[str, Any]:
    data = model.model_dump(mode="json")
    if data.get("ragguard", 0) is None:
        del data["ragguard"]  # only grounded answers carry it
    return data


def json_response(model: BaseModel) -> JSONResponse:
    return JSONResponse(dump(model))


def event(data: dict[str, Any]) -> ServerSentEvent:
    return ServerSentEvent(json.dumps(data, separators=(",", ":")), sep="\n")


def chunk_event(chunk: BaseModel) -> ServerSentEvent:
    data = dump(chunk)
    for choice in data.get("choices", []):
        delta = choice.get("delta")
        if isinstance(delta, dict):  # OpenAI sends only the delta's fields that are set
            choice["delta"] = {k: v for k, v in delta.items() if v is not None}
    return event(data)


def done() -> ServerSentEvent:
    return ServerSentEvent("[DONE]", sep="\n")
