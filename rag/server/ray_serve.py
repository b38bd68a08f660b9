"""ragguard on Ray Serve: the HTTP API as one deployment with N replicas, the generator as another.

Layout (one Serve application, ``ragguard``):

- ``ragguard-engine``: the GPU-bound part. Each replica owns one engine client built from the
  settings (our engine by default, or any registered backend) and streams ``RequestOutput``s
  back through a deployment handle. Concurrent questions from every API replica share its
  batches.
- ``ragguard-api``: the FastAPI app of ``rag.server.create_app``, unchanged, over a pipeline whose
  engine client is ``RayEngineClient`` (the handle of ``ragguard-engine``). Retrieval, guards and
  the review queue run here: the index is opened from ``index_dir`` and the review store from
  ``review_db`` / ``data_dir``, shared by every API replica (one machine: the same folder; several
  machines: a shared filesystem for the index and PostgreSQL for the review store).

Each replica answers with an ``x-ragguard-replica`` header naming itself. Replica counts and
autoscaling come from the settings (``ray_*``) or ``ragguard serve --ray`` options.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from engine import (
    EngineUnavailableError,
    Prompt,
    PromptFacade,
    PromptTokenizer,
    RequestOutput,
    SamplingParams,
    build_engine_client,
)
from rag.errors import MissingDependencyError
from rag.settings import Settings

logger = logging.getLogger(__name__)

APP_NAME = "ragguard"
ENGINE_DEPLOYMENT = "ragguard-engine"
API_DEPLOYMENT = "ragguard-api"
REPLICA_HEADER = "x-ragguard-replica"


def _import_serve() -> Any:
    try:
        from ray import serve
    except ImportError as exc:
        raise MissingDependencyError(
            "Ray Serve is not installed: pip install 'ragguard[ray]' (ray[serve])"
        ) from exc
    return serve


def _replica_name() -> str:
    serve = _import_serve()
    try:
        replica = serve.get_replica_context().replica_id
    except RuntimeError:  # not inside a replica (tests calling the classes directly)
        return "local"
    return str(getattr(replica, "unique_id", replica))


class EngineReplica:
    """The body of a ``ragguard-engine`` replica: one engine client, streamed over handles."""

    def __init__(self, settings: dict[str, Any]):
        self.settings = Settings(**settings, _env_file=None)
        self.engine = build_engine_client(
            self.settings.engine.engine_config(),
            self.settings.engine.generator_backend(),
            self.settings.engine.remote_config(),
        )

    def describe(self) -> dict[str, Any]:
        """What an API replica needs to format and budget prompts without the model."""
        return {
            "model_name": self.engine.model_name,
            "max_model_len": self.engine.max_model_len,
            "tokenizer": self.engine.tokenizer,
            "replica": _replica_name(),
        }

    async def generate(
        self, prompt: Prompt, params: SamplingParams, request_id: str
    ) -> AsyncIterator[RequestOutput]:
        # Cancelling the caller's stream cancels this generator, which aborts the request.
        async for output in self.engine.generate(prompt, params, request_id):
            yield output

    def check_health(self) -> None:
        """Ray Serve's health check: a dead engine restarts the replica."""
        self.engine.check_health()

    def __del__(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.shutdown()


class RayEngineClient(PromptFacade):
    """``EngineClient`` over the ``ragguard-engine`` deployment's handle. The tokenizer is kept
    here, so prompts are formatted and fitted without a round trip."""

    def __init__(self, handle: Any, info: dict[str, Any]):
        """``info``: the engine replica's ``describe()``."""
        self._handle = handle
        self._model_name: str = info["model_name"]
        self.prompts = PromptTokenizer(info["tokenizer"], info["max_model_len"])
        self._streams: dict[str, Any] = {}
        self._stopped = False

    @property
    def model_name(self) -> str:
        return self._model_name

    async def generate(
        self, prompt: Prompt, params: SamplingParams, request_id: str | None = None
    ) -> AsyncIterator[RequestOutput]:
        from ray.exceptions import RayError

        self.check_health()
        request_id = request_id or uuid.uuid4().hex
        if request_id in self._streams:
            raise ValueError(f"request id {request_id!r} is already in use")
        stream = self._handle.options(stream=True).generate.remote(prompt, params, request_id)
        self._streams[request_id] = stream
        finished = False
        try:
            async for output in stream:
                finished = output.finished
                yield output
        except RayError as exc:  # the replica died, Serve shut down
            raise EngineUnavailableError(f"the engine deployment failed: {exc}") from exc
        finally:
            self._streams.pop(request_id, None)
            if not finished:
                stream.cancel()

    def abort(self, request_id: str) -> None:
        stream = self._streams.get(request_id)
        if stream is not None:
            stream.cancel()

    def stats(self) -> None:
        return None

    def check_health(self) -> None:
        if self._stopped:
            raise EngineUnavailableError("the engine client is shut down")

    def shutdown(self) -> None:
        self._stopped = True
        for stream in list(self._streams.values()):
            stream.cancel()


def build_api_app(settings: dict[str, Any], handle: Any, info: dict[str, Any]) -> Any:
    """The ASGI app of one ``ragguard-api`` replica, over the engine deployment's ``handle``."""
    from rag.pipeline import Pipeline
    from rag.retrieval.embed import Embedder
    from rag.server import create_app

    s = Settings(**settings, _env_file=None)
    device = s.engine.engine_config().resolved_device()
    embedder = Embedder(s.retrieval.embedding_model, device=device, allow_hub=s.engine.allow_hub)
    pipeline = Pipeline(s, embedder, RayEngineClient(handle, info))
    app = create_app(s, pipeline=pipeline, owns_pipeline=True)  # closed when Serve stops it
    name = _replica_name()

    @app.middleware("http")
    async def name_the_replica(request: Any, call_next: Any) -> Any:
        response = await call_next(request)
        response.headers[REPLICA_HEADER] = name
        return response

    return app


class ApiReplica:
    """The body of a ``ragguard-api`` replica; Serve asks it for its app once it is built."""

    def __init__(self, engine: Any, settings: dict[str, Any]):
        self.engine = engine  # the engine deployment's handle (bound: Serve starts it first)
        self.settings = settings

    async def __serve_build_asgi_app__(self) -> Any:
        info = await self.engine.describe.remote()
        return await asyncio.to_thread(build_api_app, self.settings, self.engine, info)


def build_application(settings: Settings) -> Any:
    """The Serve application: the API deployment bound to the engine deployment."""
    serve = _import_serve()
    # Settings travel to the replicas as values (environment variables need not reach them).
    # Paths are made absolute: a replica's working directory is not the driver's.
    values = settings.flat(mode="json")
    for key, value in settings.flat().items():
        if isinstance(value, Path):
            values[key] = str(value.expanduser().resolve())
    if settings.engine.generator_api_key is not None:
        values["generator_api_key"] = settings.engine.generator_api_key.get_secret_value()
    gpus = 1.0 if settings.engine.engine_config().resolved_device().startswith("cuda") else 0.0
    engine = serve.deployment(
        EngineReplica,
        name=ENGINE_DEPLOYMENT,
        num_replicas=settings.server.ray_engine_replicas,
        ray_actor_options={"num_cpus": settings.server.ray_cpus_per_replica, "num_gpus": gpus},
        max_ongoing_requests=max(8, settings.engine.max_num_seqs * 4),
        health_check_period_s=10,
    )
    scaling: dict[str, Any] = {}
    if settings.server.ray_autoscale_max_replicas is not None:
        scaling["autoscaling_config"] = {
            "min_replicas": settings.server.ray_api_replicas,
            "max_replicas": settings.server.ray_autoscale_max_replicas,
            "target_ongoing_requests": settings.server.ray_target_ongoing_requests,
        }
    else:
        scaling["num_replicas"] = settings.server.ray_api_replicas

    api = serve.deployment(
        serve.ingress()(ApiReplica),
        name=API_DEPLOYMENT,
        ray_actor_options={"num_cpus": settings.server.ray_cpus_per_replica},
        max_ongoing_requests=settings.server.max_concurrent_questions * 4,
        **scaling,
    )
    # API replicas read the index; it is written where it is built (`ragguard ingest`).
    return api.bind(engine.bind(values), values | {"read_only_indexes": True})


def serve_with_ray(settings: Settings) -> None:
    """Start (or join, with ``ray_address``) a Ray cluster, run the application on
    ``host:port`` and block until SIGINT or SIGTERM; then shut the application down."""
    import ray

    from rag import demo
    from rag.retrieval.collection import CollectionRegistry
    from rag.retrieval.embed import Embedder

    serve = _import_serve()
    if demo.builds_demo(settings):  # once, here, rather than racing in every API replica
        registry = CollectionRegistry.from_settings(
            settings, Embedder(settings.retrieval.embedding_model)
        )
        try:
            demo.ensure_demo_index(registry)
        finally:
            registry.close()
    ray.init(address=settings.server.ray_address, include_dashboard=False, ignore_reinit_error=True)
    serve.start(http_options={"host": settings.server.host, "port": settings.server.port})
    serve.run(build_application(settings), name=APP_NAME, route_prefix="/")
    logger.info(
        "ray serve: ragguard ready on http://%s:%d", settings.server.host, settings.server.port
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    serve.delete(APP_NAME)
    serve.shutdown()
    ray.shutdown()
