"""Liveness and readiness probes."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from rag.server.schemas import HealthOut, ReadyOut
from rag.server.state import StateDep

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthOut)
def healthz() -> HealthOut:
    """The process is up (it may still be loading its model)."""
    return HealthOut(status="ok")


@router.get("/readyz", response_model=ReadyOut, responses={503: {"model": ReadyOut}})
def readyz(state: StateDep) -> ReadyOut | JSONResponse:
    """Ready to answer: model and embedder loaded. 503 while loading or after a failed load."""
    if state.pipeline is None:
        status = "failed" if state.load_error else "loading"
        body = ReadyOut(status=status, error=state.load_error)
        return JSONResponse(body.model_dump(), status_code=503)
    pipeline = state.pipeline
    return ReadyOut(
        status="ready",
        model=pipeline.generator.model_name,
        embedding_model=pipeline.embedder.model_id,
        indexes=pipeline.collections.names(),
    )
