"""Every error of the OpenAI routes, request validation included, in OpenAI's shape
(``{"error": {"message", "type", "param", "code"}}``), so that OpenAI clients raise their usual
exceptions; the app's other routes keep ragguard's shape."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from sse_starlette import ServerSentEvent
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine import EngineError
from rag.engine_failures import as_ragguard_error
from rag.errors import (
    AuthenticationError,
    EngineStartingError,
    OverloadedError,
    RagGuardError,
)
from rag.http_errors import status_of
from rag.server.disconnect import ClientDisconnected
from rag.server.openai.schemas import (
    OpenAIErrorDetail,
    OpenAIErrorOut,
)
from rag.server.openai.sse import event
from rag.server.state import ServerState

logger = logging.getLogger(__name__)


class OpenAIAPIError(Exception):
    """A request this API refuses, with OpenAI's error fields."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        error_type: str | None = None,
    ):
        super().__init__(message)
        self.status_code = status_code
        self.param = param
        self.code = code
        self.error_type = error_type or _type_for(status_code)


def _type_for(status: int) -> str:
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


_PARAMS = (
    "n",
    "temperature",
    "top_p",
    "max_tokens",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "logprobs",
)


def _param_of(message: str) -> str | None:
    """The request field a ``SamplingParams`` message names ("temperature must be in ...")."""
    first = message.split(" ", 1)[0]
    if first == "stop":
        return "stop"
    return first if first in _PARAMS else None


@dataclass(slots=True)
class _Failure:
    status: int
    detail: OpenAIErrorDetail
    headers: dict[str, str] = field(default_factory=dict)


def _failure(request: Request, exc: Exception) -> _Failure:
    """What to answer for ``exc``, in OpenAI's terms."""
    if isinstance(exc, StarletteHTTPException) and isinstance(exc.__cause__, RagGuardError):
        exc = exc.__cause__  # ours, met while FastAPI read the body (a body that is not UTF-8)
    exc = as_ragguard_error(exc) or exc  # the engine down, a remote generator's 429
    if isinstance(exc, OpenAIAPIError):
        detail = OpenAIErrorDetail(
            message=str(exc), type=exc.error_type, param=exc.param, code=exc.code
        )
        return _Failure(exc.status_code, detail)
    if isinstance(exc, RequestValidationError):
        errors = exc.errors()
        where = [
            "" if e.get("type") == "json_invalid" else ".".join(str(p) for p in e["loc"][1:])
            for e in errors
        ]
        message = "; ".join(
            f"{loc or 'body'}: {e.get('msg', 'invalid')}"
            for loc, e in zip(where, errors, strict=True)
        )
        detail = OpenAIErrorDetail(
            message=message or "invalid request body",
            type="invalid_request_error",
            param=where[0] if where and where[0] else None,
            code="invalid_value",
        )
        return _Failure(400, detail)
    if isinstance(exc, RagGuardError):
        status = 400 if status_of(exc) == 422 else status_of(exc)
        detail = OpenAIErrorDetail(
            message=str(exc), type=_type_for(status), param=None, code=exc.error_type
        )
        failure = _Failure(status, detail)
        if isinstance(exc, AuthenticationError):
            failure.headers["www-authenticate"] = "Bearer"
        if isinstance(exc, OverloadedError | EngineStartingError):
            failure.headers["retry-after"] = str(exc.retry_after_s)
        if isinstance(exc, OverloadedError):
            state: ServerState = request.app.state.ragguard
            state.telemetry.rejected.inc()
        return failure
    if isinstance(exc, ValueError):  # SamplingParams, a prompt too long for the context
        message = str(exc)
        detail = OpenAIErrorDetail(
            message=message,
            type="invalid_request_error",
            param=_param_of(message),
            code="invalid_value",
        )
        return _Failure(400, detail)
    if isinstance(exc, StarletteHTTPException):
        detail = OpenAIErrorDetail(
            message=str(exc.detail), type=_type_for(exc.status_code), code="http_error"
        )
        return _Failure(exc.status_code, detail, dict(exc.headers or {}))
    if isinstance(exc, EngineError):
        logger.error("engine error on %s: %s", request.url.path, exc)
        detail = OpenAIErrorDetail(message=str(exc), type="server_error", code="engine_error")
        return _Failure(500, detail)
    logger.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    detail = OpenAIErrorDetail(
        message="internal server error; see the server log", type="server_error", code=None
    )
    return _Failure(500, detail)


def error_response(request: Request, exc: Exception) -> JSONResponse:
    """``exc`` as an OpenAI error response."""
    failure = _failure(request, exc)
    body = OpenAIErrorOut(error=failure.detail).model_dump(mode="json")
    return JSONResponse(body, status_code=failure.status, headers=failure.headers)


def error_event(request: Request, exc: Exception) -> ServerSentEvent:
    """An error after a stream has started: an ``{"error": ...}`` data event (OpenAI clients
    raise it as ``APIError``)."""
    failure = _failure(request, exc)
    return event(OpenAIErrorOut(error=failure.detail).model_dump(mode="json"))


class OpenAIRoute(APIRoute):
    """A route whose errors (validation, authentication, refused values, overload) are answered
    in OpenAI's error shape. A client that went away is left to the app (499)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def openai_route_handler(request: Request) -> Response:
            try:
                return await handle(request)
            except ClientDisconnected:
                raise
            except Exception as exc:
                return error_response(request, exc)

        return openai_route_handler
