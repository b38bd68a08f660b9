"""``GET /metrics``: Prometheus metrics (latency histograms, load, engine and decision counters)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from rag.server.state import StateDep

router = APIRouter(tags=["health"])


@router.get("/metrics", response_class=Response)
async def metrics(state: StateDep) -> Response:
    """The app's metrics in the Prometheus text format (engine figures once the model loaded).
    Built in a worker thread: the risk figures read the review store."""
    body = await run_in_threadpool(generate_latest, state.telemetry.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
