"""``Pipeline``: the stages composed — retrieve → generate → check → decide → act.

``Pipeline.stream`` is the one path every caller runs: it yields the passages, the answer's text
as it is generated, and finally the ``Result`` (built once, when the guards have decided).
``ask_async`` keeps only the result; ``ask`` / ``ask_with`` run it for synchronous callers on a
private event loop. The server awaits the same coroutines on its own loop.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncGenerator, Collection, Iterator
from dataclasses import replace

from engine import (
    EngineClient,
    Generator,
    ModelLoadError,
    ModelNotFoundError,
    RemoteBusyError,
    as_engine_client,
    build_engine_client,
)
from engine import EngineUnavailableError as EngineDown
from guards.review import ReviewStore
from rag import citations, demo, logs
from rag.background import BackgroundLoop
from rag.engine_failures import as_ragguard_error
from rag.errors import DeadlineExceededError, InvalidInputError
from rag.prompt import NO_ANSWER
from rag.retrieval.collection import CollectionRegistry
from rag.retrieval.embed import Embedder
from rag.review_desk import ReviewDesk, open_review_store
from rag.review_desk.risk import RiskControl
from rag.settings import Settings
from rag.stages import (
    ActStage,
    CheckStage,
    DecideStage,
    GenerateStage,
    Generation,
    Retrieval,
    RetrieveStage,
)
from rag.stages.answer_cache import AnswerCache
from rag.stages.check import AnswerChecker, SelfVerifier, build_judge
from rag.stages.question import Ask
from rag.types import (
    AskEvent,
    AskOptions,
    Passage,
    PassagesEvent,
    Result,
    ResultEvent,
    TokenEvent,
    result_of,
)

__all__ = ["AskOptions", "Pipeline"]


class Pipeline:
    """Grounded question answering over the collections of one index folder."""

    def __init__(
        self,
        settings: Settings,
        embedder: Embedder,
        engine: EngineClient | Generator,
        *,
        reviews: ReviewStore | None = None,
        retriever: RetrieveStage | None = None,
        checker: AnswerChecker | None = None,
        judge_engine: EngineClient | None = None,
    ):
        """``engine``: an engine client (owned by the caller), or a synchronous generator such
        as ``LLMEngine``/``HFGenerator``, which the pipeline wraps in a client it owns.
        ``reviews``: the review store to queue into, owned by the caller (the server's); by
        default the pipeline opens the settings' store and owns it.
        ``retriever`` and ``checker``: the retrieve stage and the guards, when the caller has
        them (pipelines sharing one knowledge graph, a retrieve stage with extra retrievers
        registered); by default built from the settings (no checker with guards disabled).
        ``judge_engine``: the judge model's client when it is not the generator (owned by the
        caller); by default the pipeline loads the configured judge model itself."""
        self.settings = settings
        self.embedder = embedder
        self.engine, self._owns_engine = as_engine_client(engine)
        owns_retriever = retriever is None
        if retriever is None:
            retriever = RetrieveStage(CollectionRegistry.from_settings(settings, embedder))
        self.retriever = retriever
        self.collections = retriever.collections
        self.generator = GenerateStage(self.engine, settings)
        if checker is None and settings.guards.guards_enabled:
            checker = AnswerChecker(settings, embedder)
        checker = checker if settings.guards.guards_enabled else None
        verifier = (
            SelfVerifier(self.engine, settings.effective_system_prompt())
            if checker is not None and settings.guards.self_verification
            else None
        )
        self._owned_judge_engine: EngineClient | None = None
        try:
            judge, self._owned_judge_engine = build_judge(
                settings, self.engine, checker, judge_engine
            )
            store = open_review_store(settings) if reviews is None else reviews
        except BaseException:  # nothing this pipeline started may outlive a failed start
            if self._owned_judge_engine is not None:
                self._owned_judge_engine.shutdown()
            if self._owns_engine:
                self.engine.shutdown()
            if owns_retriever:
                self.collections.close()
            raise
        self.check = CheckStage(checker, verifier, judge) if checker is not None else None
        """None with guards disabled: no check, decide or act."""
        self.reviews = ReviewDesk(store, owns_store=reviews is None)
        self.risk = RiskControl(store, settings)
        self.decide = DecideStage(self.risk)
        self.act = ActStage(self.reviews, self.risk)
        self.cache = AnswerCache(store, settings)
        self._loop = BackgroundLoop()

    @classmethod
    def from_settings(
        cls,
        settings: Settings | None = None,
        *,
        require_index: bool = True,
        reviews: ReviewStore | None = None,
        serving: bool = False,
    ) -> Pipeline:
        """Load the embedding model and the generator named by the settings (offline by default).

        The settings' index must be built (``IndexNotFoundError`` at once, before any model
        loads), unless ``require_index`` is false; the demo index is built on first use, as
        ``ragguard serve`` does (``build_demo_index``). A remote generator that is still
        starting is waited for (up to ``generator_startup_timeout_s``), unless ``serving`` (the
        API server): then the pipeline is returned at once and the engine's ``check_health``
        says what it waits for; ``serving`` also makes ``generator=auto`` the engine in a
        process of its own (``Settings.generator_backend``).
        """
        settings = settings or Settings()
        if require_index:
            demo.check_index_exists(settings)
        if not settings.engine.allow_hub:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        config = settings.engine.engine_config()
        embedder = Embedder(
            settings.retrieval.embedding_model,
            device=config.resolved_device(),
            allow_hub=settings.engine.allow_hub,
        )
        try:
            engine = build_engine_client(
                config,
                settings.engine.generator_backend(serving=serving),
                settings.engine.remote_config(connect_in_background=serving),
            )
        except (ModelNotFoundError, ModelLoadError) as exc:  # the engine names no setting
            raise type(exc)(
                f"{exc} [settings: RAGGUARD_MODEL, RAGGUARD_ALLOW_HUB, RAGGUARD_GENERATOR]"
            ) from exc
        try:
            pipeline = cls(settings, embedder, engine, reviews=reviews)
        except BaseException:
            engine.shutdown()
            raise
        pipeline._owns_engine = True
        if demo.builds_demo(settings):
            try:
                demo.ensure_demo_index(pipeline.collections)
            except BaseException:
                pipeline.close()
                raise
        return pipeline

    @property
    def checker(self) -> AnswerChecker | None:
        """The guards, the confidence model and the policy (None with guards disabled)."""
        return self.check.checker if self.check is not None else None

    def use_checker(self, checker: AnswerChecker) -> None:
        """Check answers with ``checker`` from now on (one over another knowledge graph, say)."""
        if self.check is None:
            raise ValueError("the pipeline's guards are disabled (guards_enabled=False)")
        self.check.checker = checker

    def close(self) -> None:
        self._loop.close()
        if self._owned_judge_engine is not None:
            self._owned_judge_engine.shutdown()
        if self._owns_engine:
            self.engine.shutdown()
        self.collections.close()
        self.risk.close()
        self.reviews.close()

    # ------------------------------------------------------------- interface
    def ask(self, question: str, **options: object) -> Result:
        """Answer ``question`` from the index, with citations; options: ``AskOptions`` fields."""
        try:
            opts = AskOptions(**options)  # type: ignore[arg-type]
        except TypeError as exc:
            raise InvalidInputError(f"unknown option: {exc}") from exc
        return self.ask_with(question, opts)

    def ask_with(
        self,
        question: str,
        options: AskOptions,
        *,
        request_id: str | None = None,
        degrade: Collection[str] = (),
    ) -> Result:
        """``ask`` with the options as one object; ``request_id`` ties logs to the caller's id;
        ``degrade``: work to skip, as under load (see ``stream``)."""
        return self._loop.run(
            result_of(self.stream(question, options, request_id=request_id, degrade=degrade))
        )

    def ask_stream(
        self, question: str, options: AskOptions | None = None, *, request_id: str | None = None
    ) -> Iterator[AskEvent]:
        """``stream`` for synchronous callers (the CLI's ``--stream``)."""
        return self._loop.iterate(self.stream(question, options, request_id=request_id))

    async def ask_async(
        self, question: str, options: AskOptions | None = None, *, request_id: str | None = None
    ) -> Result:
        """``ask`` for asyncio callers: cancelling it stops the generation."""
        return await result_of(self.stream(question, options, request_id=request_id))

    async def stream(
        self,
        question: str,
        options: AskOptions | None = None,
        *,
        request_id: str | None = None,
        degrade: Collection[str] = (),
    ) -> AsyncGenerator[AskEvent, None]:
        """The passages, the answer's text as it is generated, then the checked ``Result``.
        Leaving early aborts the generation, and an answer nobody received is never queued for
        review. Past the deadline, ``DeadlineExceededError``. ``degrade``: work to skip under
        load ("samples": no extra samples; "judge": no judge cascade), reported in the result's
        ``degraded`` where it skipped something."""
        ask = self._start(question, options or AskOptions(), request_id)
        ask.degrade = degrade
        timeout = ask.options.timeout_s or self.settings.server.request_timeout_s
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        stages = self._stages(ask)
        try:
            while True:
                async with asyncio.timeout_at(deadline):
                    event = await anext(stages)
                yield event
        except StopAsyncIteration:
            return
        except TimeoutError as exc:
            raise DeadlineExceededError(
                f"no answer within the {timeout:g} s deadline; the generation was stopped"
            ) from exc
        except (EngineDown, RemoteBusyError) as exc:
            ours = as_ragguard_error(exc)
            assert ours is not None
            raise ours from exc
        finally:
            await stages.aclose()

    # ---------------------------------------------------------------- stages
    def _start(self, question: str, options: AskOptions, request_id: str | None) -> Ask:
        """Validate what can be validated before any work."""
        s = self.settings
        question = question.strip()
        if not question:
            raise InvalidInputError("the question is empty")
        if len(question) > s.server.max_question_chars:
            raise InvalidInputError(
                f"the question has {len(question)} characters; "
                f"at most {s.server.max_question_chars} are allowed"
            )
        if options.timeout_s is not None and not options.timeout_s > 0:
            raise InvalidInputError(f"timeout_s must be > 0, got {options.timeout_s}")
        checker = self.checker
        return Ask(
            question,
            options,
            request_id or uuid.uuid4().hex,
            options.index or s.retrieval.index_name,
            checker.policy_for(options) if checker is not None else None,
        )

    async def _stages(self, ask: Ask) -> AsyncGenerator[AskEvent, None]:
        """The walk: each stage once, its output the next one's input; the short cuts end it."""
        s, opts, model = self.settings, ask.options, self.engine.model_name
        top_k = s.retrieval.top_k if opts.top_k is None else opts.top_k
        min_score = s.retrieval.min_score if opts.min_score is None else opts.min_score
        mode = opts.retrieval or s.retrieval.mode
        logs.note(index=ask.index, top_k=top_k, min_score=min_score, retrieval=mode)
        since = time.perf_counter()
        retrieval = await asyncio.to_thread(
            self.retriever.run, ask.question, ask.index, top_k, min_score, mode
        )
        ask.lap("retrieve_s", since)
        reviewed = await asyncio.to_thread(
            self.reviews.reviewed_answer, ask.question, ask.index, retrieval.version
        )
        if reviewed is not None:
            passages = [Passage(**p) for p in reviewed.passages]
            yield PassagesEvent(passages, ask.index)
            yield ResultEvent(ask.reviewed(model, reviewed, passages))
            return
        cache_key, cached = await asyncio.to_thread(
            self.cache.find,
            ask.question,
            ask.index,
            retrieval.version,
            ask.options,
            ask.request_id,
            self.risk,
        )
        if cached is not None:
            logs.note(cached_from=cached.cached_from, decision=cached.decision.value)
            yield PassagesEvent(cached.passages, ask.index)
            ask.timings["total_s"] = time.perf_counter() - ask.started
            yield ResultEvent(replace(cached, timings=dict(ask.timings)))
            return
        passages = retrieval.passages
        if not passages:
            yield PassagesEvent([], ask.index)
            yield ResultEvent(ask.result(model, NO_ANSWER, [], abstain=retrieval.empty_reason))
            return

        # Tokenising the prompt (perhaps several times, to fit it) is CPU work: off the loop.
        plan = await asyncio.to_thread(self.generator.plan, ask.question, passages, opts)
        if "samples" in ask.degrade and plan.samples is not None:
            plan = replace(plan, samples=None)
            ask.degraded.append("samples")
        yield PassagesEvent(plan.passages, ask.index)
        generation: Generation | None = None
        async for piece in self.generator.stream(plan, ask.request_id):
            if isinstance(piece, str):
                yield TokenEvent(piece)
            else:
                generation = piece
        assert generation is not None
        ask.timings.update(generation.timings())
        answer = generation.answer.text.strip()
        if citations.is_declined(answer):
            reason = "the model found no answer in the passages"
            yield ResultEvent(
                ask.result(model, NO_ANSWER, plan.passages, generation.usage, abstain=reason)
            )
            return
        if self.check is None:
            result = ask.result(model, answer, plan.passages, generation.usage)
        else:
            result = await self._check_decide_act(ask, retrieval, answer, plan.passages, generation)
        if cache_key is not None:
            await asyncio.to_thread(self.cache.remember, cache_key, result, retrieval.version)
        yield ResultEvent(result)

    async def _check_decide_act(
        self,
        ask: Ask,
        retrieval: Retrieval,
        answer: str,
        passages: list[Passage],
        generation: Generation,
    ) -> Result:
        """The check, decide and act stages: the guards, then answer, withhold, or queue for a
        person; the Result."""
        assert self.check is not None and ask.policy is not None
        model = self.engine.model_name
        check = await self.check.run(
            ask.question,
            answer,
            passages,
            generation,
            ask.request_id,
            judge="judge" not in ask.degrade,
        )
        ask.timings.update(check.timings)
        if check.judge_skipped:
            ask.degraded.append("judge")  # the first-stage confidence stands
        own = ask.options.abstain_below is not None or ask.options.review_below is not None
        judged = await asyncio.to_thread(
            self.decide.run, ask.index, check.checked, ask.policy, own=own
        )
        result = ask.decided(model, answer, passages, generation, check, judged)
        return await self.act.run(result, retrieval.version, judged)
