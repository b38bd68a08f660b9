"""Liveness and readiness probes."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from engine import EngineStartingError, EngineUnavailableError
from rag.server.auth import sees_details
from rag.server.schemas import HealthOut, ReadyOut
from rag.server.state import ServerState, StateDep

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthOut)
async def healthz() -> HealthOut:
    """The process is up (it may still be loading its model)."""
    return HealthOut(status="ok")


@router.get(
    "/readyz",
    response_model=ReadyOut,
    response_model_exclude_none=True,
    responses={503: {"model": ReadyOut}},
)
async def readyz(state: StateDep, request: Request) -> ReadyOut | JSONResponse:
    """Ready to answer: model and embedder loaded, engine healthy. 503 while loading
    (``loading``), while a remote generator is still starting or reconnecting (``waiting``),
    after a failed load or when the engine has stopped (``failed``). Answered on the event
    loop, never behind model work. Only the status unless the caller has a valid key (or,
    without keys, is local): the model, the index names and error messages are not for anyone
    who can reach the port."""
    body = _readiness(state)
    if not sees_details(request):
        body = ReadyOut(status=body.status)
    if body.status != "ready":
        return JSONResponse(body.model_dump(exclude_none=True), status_code=503)
    return body


def _readiness(state: ServerState) -> ReadyOut:
    if state.pipeline is None or state.engine is None or state.collections is None:
        return ReadyOut(status="failed" if state.load_error else "loading", error=state.load_error)
    try:
        state.engine.check_health()
    except EngineStartingError as exc:  # a remote generator still starting or reconnecting
        return ReadyOut(status="waiting", error=str(exc))
    except EngineUnavailableError as exc:
        return ReadyOut(status="failed", error=str(exc))
    return ReadyOut(
        status="ready",
        model=state.engine.model_name,
        embedding_model=state.pipeline.embedder.model_id,
        indexes=state.collections.names(),
    )
