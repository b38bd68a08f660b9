"""``create_app(settings)``: the FastAPI application. It only composes routers and handlers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine import EngineError
from engine import EngineUnavailableError as EngineDown
from guards.review import ReviewError
from rag.engine_failures import as_ragguard_error
from rag.errors import AuthenticationError, EngineStartingError, OverloadedError, RagGuardError
from rag.http_errors import error_type_of, status_of
from rag.pipeline import Pipeline
from rag.review_desk import open_review_store
from rag.server import page
from rag.server.auth import KeyStore, Role, log_protection, require
from rag.server.disconnect import ClientDisconnected
from rag.server.loop_lag import start_loop_lag_monitor
from rag.server.openai import routes as openai
from rag.server.request_log import RequestLog
from rag.server.routers import answers, ask, documents, health, keys, metrics, reviews
from rag.server.state import ServerState
from rag.server.utf8 import Utf8JsonBodies
from rag.settings import Settings

logger = logging.getLogger(__name__)


def _load(state: ServerState) -> None:
    # A missing index is not fatal here: documents can be posted to it once the server runs.
    # One owner of the review store: the lifespan's, which reviewers use while the model loads.
    # A remote generator still starting is waited for in the background: /readyz says so.
    pipeline = Pipeline.from_settings(
        state.settings, require_index=False, reviews=state.reviews, serving=True
    )
    _watch(state, pipeline)
    state.hold(pipeline)


def _watch(state: ServerState, pipeline: Pipeline) -> None:
    """Expose the loaded pipeline's engine, risk control and answer cache in ``/metrics``."""
    state.telemetry.watch_engine(pipeline.engine.stats)
    state.telemetry.watch_risk(pipeline.risk.status)
    cache = pipeline.cache
    state.telemetry.watch_cache(lambda: (cache.hits, cache.misses))


async def _load_in_background(state: ServerState) -> None:
    try:
        await run_in_threadpool(_load, state)
        logger.info("ready: model and embedder loaded")
    except Exception as exc:  # reported by /readyz and every model route
        logger.exception("loading failed")
        state.load_error = f"{type(exc).__name__}: {exc}"


def _error(status: int, error: str, detail: object) -> JSONResponse:
    return JSONResponse({"detail": detail, "error": error}, status_code=status)


def _add_exception_handlers(app: FastAPI) -> None:
    async def known_error(request: Request, exc: Exception) -> Response:
        """ragguard's, the review queue's and the engine's errors, by ``rag.http_errors``."""
        if isinstance(exc, ClientDisconnected):
            return Response(status_code=499)  # nobody reads it; logged as "client closed request"
        exc = as_ragguard_error(exc) or exc  # the engine down, a remote generator's 429
        status = status_of(exc)
        if status == 500:
            logger.error("error on %s %s: %s", request.method, request.url.path, exc)
        response = _error(status, error_type_of(exc), str(exc))
        if isinstance(exc, AuthenticationError):
            response.headers["www-authenticate"] = "Bearer"
        if isinstance(exc, OverloadedError | EngineStartingError):
            response.headers["retry-after"] = str(exc.retry_after_s)
        if isinstance(exc, OverloadedError):
            request.app.state.ragguard.telemetry.rejected.inc()
        return response

    for known in (RagGuardError, ReviewError, EngineError, EngineDown, ClientDisconnected):
        app.add_exception_handler(known, known_error)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        # Routing and framework errors (404 unknown route, 405, malformed multipart, ...).
        if isinstance(exc.__cause__, RagGuardError):  # ours, met while FastAPI read the body
            return await known_error(request, exc.__cause__)
        response = _error(exc.status_code, "http_error", exc.detail)
        response.headers.update(exc.headers or {})
        return response

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()
        ]
        return _error(422, "invalid_request", errors)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error on %s %s", request.method, request.url.path)
        return _error(500, "internal_error", "internal server error; see the server log")


_DESCRIPTION = """Errors are `{"detail": ..., "error": ...}` (the OpenAI-compatible routes answer
in OpenAI's shape, with 400 for every refused request). Request bodies are JSON in UTF-8: another
encoding is refused with 400 (`invalid_encoding`). Unknown fields and values of another type than
the declared one (`"1"` or `false` for a number, `0` for a boolean) are refused with 422, not
coerced; a JSON integer is a number."""


def create_app(
    settings: Settings | None = None,
    *,
    pipeline: Pipeline | None = None,
    owns_pipeline: bool = False,
) -> FastAPI:
    """Build the API. Given a ``pipeline`` (tests, embedding in an app), nothing is loaded, and
    the caller closes it, unless ``owns_pipeline`` hands it to the app (a Ray Serve replica,
    whose app is all that lives on): then it is closed when the app shuts down."""
    state = ServerState(settings or (pipeline.settings if pipeline else Settings()), pipeline)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        s = state.settings
        if s.server.worker_threads is not None:  # what asyncio.to_thread runs the stages' work in
            asyncio.get_running_loop().set_default_executor(
                ThreadPoolExecutor(s.server.worker_threads, thread_name_prefix="ragguard-worker")
            )
        state.keys = KeyStore(s.keys_location(), s.server.api_keys)
        log_protection(state.keys)  # a loud warning when authentication is off
        # Reviewers can work while the model loads: the queue does not need it.
        own_reviews = None if pipeline else await run_in_threadpool(open_review_store, s)
        state.reviews = pipeline.reviews.store if pipeline else own_reviews
        if pipeline is not None:
            _watch(state, pipeline)
        # Load in the background so that /healthz and /readyz answer while the model loads.
        task = None if state.pipeline else asyncio.create_task(_load_in_background(state))
        lag_monitor = start_loop_lag_monitor(state.telemetry.loop_lag.observe)
        try:
            yield
        finally:
            lag_monitor.cancel()
            if task is not None:
                task.cancel()
            if not await state.admission.drain(s.server.shutdown_grace_s):
                logger.warning(
                    "shutdown: questions still at work after %.0f s", s.server.shutdown_grace_s
                )
            if state.pipeline is not None and (pipeline is None or owns_pipeline):
                await run_in_threadpool(state.pipeline.close)
            if own_reviews is not None:
                own_reviews.close()
            state.keys.close()

    # FastAPIOffline: /docs and /redoc load their scripts from this server, not from a CDN.
    app = FastAPIOffline(
        title="ragguard",
        version="0.1.0",
        summary="Grounded question answering with checked answers.",
        description=_DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.ragguard = state
    _add_exception_handlers(app)
    app.add_middleware(Utf8JsonBodies)

    # Outermost: every request gets its id and one log record, errors and 404s included.
    app.add_middleware(
        RequestLog,
        log_text=state.settings.logging.log_text,
        resources=state.telemetry.resource_fields,
    )

    app.include_router(health.router)
    app.include_router(metrics.router)
    app.include_router(ask.router, dependencies=[Depends(require(Role.APP))])
    app.include_router(answers.router)
    app.include_router(openai.router, dependencies=[Depends(require(Role.APP))])
    app.include_router(documents.router, dependencies=[Depends(require(Role.ADMIN))])
    app.include_router(reviews.router)
    app.include_router(keys.router, dependencies=[Depends(require(Role.ADMIN))])
    app.include_router(page.router)
    return app
