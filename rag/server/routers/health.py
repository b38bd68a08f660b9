"""Liveness and readiness probes."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from engine.client import EngineUnavailableError
from rag.server.schemas import HealthOut, ReadyOut
from rag.server.state import StateDep

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthOut)
async def healthz() -> HealthOut:
    """The process is up (it may still be loading its model)."""
    return HealthOut(status="ok")


@router.get("/readyz", response_model=ReadyOut, responses={503: {"model": ReadyOut}})
async def readyz(state: StateDep) -> ReadyOut | JSONResponse:
    """Ready to answer: model and embedder loaded, engine healthy. 503 while loading, after a
    failed load, or when the engine has stopped. Answered on the event loop, never behind model
    work."""
    if state.pipeline is None:
        status = "failed" if state.load_error else "loading"
        body = ReadyOut(status=status, error=state.load_error)
        return JSONResponse(body.model_dump(), status_code=503)
    pipeline = state.pipeline
    try:
        pipeline.engine.check_health()
    except EngineUnavailableError as exc:
        body = ReadyOut(status="failed", error=str(exc))
        return JSONResponse(body.model_dump(), status_code=503)
    return ReadyOut(
        status="ready",
        model=pipeline.engine.model_name,
        embedding_model=pipeline.embedder.model_id,
        indexes=pipeline.collections.names(),
    )
