"""What the server holds between requests: settings, and once it has loaded the pipeline with
the parts of it the routes use (the engine client, the collections, the checker)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request

from engine import EngineClient
from guards.review import ReviewStore
from rag.errors import NotReadyError
from rag.pipeline import Pipeline
from rag.retrieval.collection import CollectionRegistry
from rag.server.admission import Admission
from rag.server.auth import KeyStore
from rag.server.degrade import Degrader
from rag.server.telemetry import Telemetry
from rag.settings import Settings
from rag.stages.check import AnswerChecker

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class ServerState:
    """Owned by the app; the pipeline and its parts are None until the lifespan has loaded it
    (``hold``), or held from the start for an app given a pipeline."""

    settings: Settings
    pipeline: Pipeline | None = None
    load_error: str | None = None
    engine: EngineClient | None = None
    """The engine client the pipeline generates with (the raw model routes use it too)."""
    collections: CollectionRegistry | None = None
    """The collections of the index folder: what the document and index routes work on."""
    checker: AnswerChecker | None = None
    """The guards, the confidence and the policy (None too with guards disabled)."""
    keys: KeyStore | None = None
    """Opened by the lifespan."""
    reviews: ReviewStore | None = None
    """The one review store: opened by the lifespan (reviewers work while the model loads) and
    lent to the pipeline it loads; or, for an app given a pipeline, that pipeline's."""
    telemetry: Telemetry = field(default_factory=Telemetry)
    admission: Admission = field(init=False)
    degrader: Degrader = field(init=False)

    def __post_init__(self) -> None:
        if self.pipeline is not None:
            self.hold(self.pipeline)
        self.degrader = Degrader(
            self.settings.server.degrade_waiting, self.settings.server.degrade_queue_s
        )
        self.admission = Admission(
            self.settings.server.max_concurrent_questions,
            self.settings.server.max_waiting_questions,
            self.telemetry.load,
            adaptive=self.settings.server.adaptive_concurrency,
            max_queue_wait_s=self.settings.server.max_queue_wait_s,
            max_queue_wait_services=self.settings.server.max_queue_wait_services,
        )

    def hold(self, pipeline: Pipeline) -> None:
        """Hold the loaded ``pipeline`` and its parts; the pipeline last, as it says "ready"."""
        self.engine = pipeline.engine
        self.collections = pipeline.collections
        self.checker = pipeline.checker
        self.pipeline = pipeline

    def degrade(self, waited_s: float) -> tuple[str, ...]:
        """The degradation steps for a question just admitted after ``waited_s``."""
        return self.degrader.steps(self.telemetry.load.waiting, waited_s)


def get_state(request: Request) -> ServerState:
    state: ServerState = request.app.state.ragguard
    return state


def _not_ready(state: ServerState) -> NotReadyError:
    if state.load_error:
        return NotReadyError(f"the model failed to load: {state.load_error}")
    return NotReadyError("the model and index are still loading; retry shortly (see /readyz)")


def get_pipeline(request: Request) -> Pipeline:
    state = get_state(request)
    if state.pipeline is None:
        raise _not_ready(state)
    return state.pipeline


def get_engine(request: Request) -> EngineClient:
    state = get_state(request)
    if state.engine is None or state.pipeline is None:
        raise _not_ready(state)
    return state.engine


def get_collections(request: Request) -> CollectionRegistry:
    state = get_state(request)
    if state.collections is None or state.pipeline is None:
        raise _not_ready(state)
    return state.collections


def get_checker(request: Request) -> AnswerChecker | None:
    """The checker once the pipeline has loaded (None: guards disabled)."""
    state = get_state(request)
    if state.pipeline is None:
        raise _not_ready(state)
    return state.checker


def get_settings(request: Request) -> Settings:
    return get_state(request).settings


def get_reviews(request: Request) -> ReviewStore:
    state = get_state(request)
    if state.reviews is None:
        raise NotReadyError("the review store is not open yet; retry shortly")
    return state.reviews


def get_keys(request: Request) -> KeyStore:
    state = get_state(request)
    if state.keys is None:
        raise NotReadyError("the server is starting; retry shortly")
    return state.keys


PipelineDep = Annotated[Pipeline, Depends(get_pipeline)]
EngineDep = Annotated[EngineClient, Depends(get_engine)]
CollectionsDep = Annotated[CollectionRegistry, Depends(get_collections)]
CheckerDep = Annotated[AnswerChecker | None, Depends(get_checker)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
StateDep = Annotated[ServerState, Depends(get_state)]
ReviewsDep = Annotated[ReviewStore, Depends(get_reviews)]
KeysDep = Annotated[KeyStore, Depends(get_keys)]
