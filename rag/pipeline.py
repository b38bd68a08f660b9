"""``Pipeline``: the stages composed — retrieve → generate → check → decide → act.

``Pipeline.stream`` is the one path every caller runs: it yields the passages, the answer's text
as it is generated, and finally the ``Result`` (built once, when the guards have decided).
``ask_async`` keeps only the result; ``ask`` / ``ask_with`` run it for synchronous callers on a
private event loop. The server awaits the same coroutines on its own loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import AsyncGenerator, Collection, Iterator
from dataclasses import dataclass, field, replace

from engine import (
    EngineClient,
    EngineError,
    Generator,
    ModelLoadError,
    ModelNotFoundError,
    RemoteBusyError,
    as_engine_client,
    build_engine_client,
)
from engine import EngineUnavailableError as EngineDown
from guards import Action, Policy
from guards.review import CachedAnswer, ReviewStore
from rag import citations, demo, logs
from rag.background import BackgroundLoop
from rag.engine_failures import as_ragguard_error
from rag.errors import (
    DeadlineExceededError,
    InvalidInputError,
)
from rag.guarding import AnswerChecker, Checked, candidate, finish_reason
from rag.judge import build_judge
from rag.prompt import NO_ANSWER
from rag.retrieval.collection import CollectionRegistry
from rag.retrieval.embed import Embedder
from rag.review_desk import ReviewDesk, open_review_store
from rag.review_desk.risk import RiskControl
from rag.settings import Settings
from rag.stages import GenerateStage, Generation, Retrieval, RetrieveStage
from rag.stages.act import ActStage
from rag.stages.answer_cache import AnswerCache
from rag.types import (
    AskEvent,
    AskOptions,
    Passage,
    PassagesEvent,
    Result,
    ResultEvent,
    Sample,
    TokenEvent,
    Usage,
    result_of,
)
from rag.verification import SelfVerifier

__all__ = ["AskOptions", "Pipeline"]
logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Ask:
    """One question on its way through the stages."""

    question: str
    options: AskOptions
    request_id: str
    index: str
    policy: Policy | None
    degrade: Collection[str] = ()
    """Work to skip under load (``rag.server.degrade.STEPS``)."""
    started: float = field(default_factory=time.perf_counter)
    timings: dict[str, float] = field(default_factory=dict)
    degraded: list[str] = field(default_factory=list)
    """The steps of ``degrade`` that did skip something for this answer."""

    def lap(self, name: str, since: float) -> None:
        self.timings[name] = time.perf_counter() - since


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
        self.checker = checker if settings.guards.guards_enabled else None
        self.verifier = (
            SelfVerifier(self.engine, settings.effective_system_prompt())
            if self.checker is not None and settings.guards.self_verification
            else None
        )
        self._owned_judge_engine: EngineClient | None = None
        try:
            self.judge, self._owned_judge_engine = build_judge(
                settings, self.engine, self.checker, judge_engine
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
        self.reviews = ReviewDesk(store, owns_store=reviews is None)
        self.risk = RiskControl(store, settings)
        self.act = ActStage(self.checker, self.reviews, self.risk) if self.checker else None
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
    def _start(self, question: str, options: AskOptions, request_id: str | None) -> _Ask:
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
        policy = self.checker.policy_for(options) if self.checker is not None else None
        return _Ask(
            question,
            options,
            request_id or uuid.uuid4().hex,
            options.index or s.retrieval.index_name,
            policy,
        )

    async def _stages(self, ask: _Ask) -> AsyncGenerator[AskEvent, None]:
        s, opts = self.settings, ask.options
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
            yield ResultEvent(self._reviewed(ask, reviewed, passages))
            return
        cache_key, cached = await asyncio.to_thread(self._cached, ask, retrieval.version)
        if cached is not None:
            logs.note(cached_from=cached.cached_from, decision=cached.decision.value)
            yield PassagesEvent(cached.passages, ask.index)
            ask.timings["total_s"] = time.perf_counter() - ask.started
            yield ResultEvent(replace(cached, timings=dict(ask.timings)))
            return
        passages = retrieval.passages
        if not passages:
            yield PassagesEvent([], ask.index)
            yield ResultEvent(self._result(ask, NO_ANSWER, [], abstain=retrieval.empty_reason))
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
        ask.timings["generate_s"] = generation.generate_s
        if generation.time_to_first_token_s is not None:
            ask.timings["time_to_first_token_s"] = generation.time_to_first_token_s
        if generation.queue_s is not None:
            ask.timings["queue_s"] = generation.queue_s
        answer = generation.answer.text.strip()
        if citations.is_declined(answer):
            reason = "the model found no answer in the passages"
            yield ResultEvent(
                self._result(ask, NO_ANSWER, plan.passages, generation.usage, abstain=reason)
            )
            return
        if self.checker is None:
            result = self._result(ask, answer, plan.passages, generation.usage)
        else:
            checked, verification = await self._check(ask, answer, plan.passages, generation)
            result = await self._act(
                ask, retrieval, answer, plan.passages, generation, checked, verification
            )
        if cache_key is not None:
            await asyncio.to_thread(self.cache.remember, cache_key, result, retrieval.version)
        yield ResultEvent(result)

    def _cached(self, ask: _Ask, version: str) -> tuple[str | None, Result | None]:
        """The answer cache's key for this question and what it holds under it (None and None:
        the cache is off)."""
        if not self.cache.enabled:
            return None, None
        state = self.risk.state(ask.index)
        threshold = state.choice.threshold if state.choice is not None else None
        judgement = (state.version, threshold)
        key = self.cache.key(ask.question, ask.index, version, ask.options, judgement)
        return key, self.cache.lookup(key, ask.request_id)

    async def _check(
        self, ask: _Ask, answer: str, passages: list[Passage], generation: Generation
    ) -> tuple[Checked, float | None]:
        """The check stage: self-verification (if on), the guards and the confidence."""
        assert self.checker is not None
        verification = None
        if self.verifier is not None:
            since = time.perf_counter()
            verification = await self.verifier.score(
                ask.question, passages, answer, f"{ask.request_id}-verify-{uuid.uuid4().hex[:8]}"
            )
            ask.lap("verify_s", since)
        since = time.perf_counter()
        samples = [candidate(c) for c in generation.completions]
        checked = await asyncio.to_thread(
            self.checker.check,
            ask.question,
            samples[0],
            samples,
            passages,
            verification=verification,
        )
        ask.lap("guards_s", since)
        judging = self.judge is not None and self.judge.should_judge(checked.confidence)
        if judging and "judge" in ask.degrade:
            ask.degraded.append("judge")  # the first-stage confidence stands
        elif self.judge is not None and judging:
            since = time.perf_counter()
            try:
                judgement = await self.judge.score(
                    ask.question, passages, answer, f"{ask.request_id}-judge-{uuid.uuid4().hex[:8]}"
                )
            except EngineError as exc:  # the answer stands, unjudged (its judge guard abstains)
                logger.warning("the judge failed (%s): the answer is left unjudged", exc)
                judgement = None
            ask.lap("judge_s", since)
            if judgement is not None:
                checked = self.checker.judged(checked, judgement)
        return checked, verification

    async def _act(
        self,
        ask: _Ask,
        retrieval: Retrieval,
        answer: str,
        passages: list[Passage],
        generation: Generation,
        checked: Checked,
        verification: float | None,
    ) -> Result:
        """The decide and act stages: answer, withhold, or queue for a person; the Result."""
        assert self.act is not None
        own = ask.options.abstain_below is not None or ask.options.review_below is not None
        judged = await asyncio.to_thread(self.act.decide, ask.index, checked, ask.policy, own=own)
        decision, checked = judged.decision, judged.checked
        withheld = decision.action is Action.ABSTAIN
        result = self._result(
            ask,
            NO_ANSWER if withheld else answer,
            passages,
            generation.usage,
            abstain="; ".join(decision.reasons) if withheld else None,
            decision=decision.action,
            reasons=decision.reasons,
            checked=checked,
            samples=[
                Sample(c.text.strip(), list(c.logprobs), finish_reason(c))
                for c in generation.completions
            ],
            verification=verification,
        )
        return await self.act.act(result, retrieval.version, judged)

    def _reviewed(self, ask: _Ask, reviewed: CachedAnswer, passages: list[Passage]) -> Result:
        """A reviewer's approved (or edited) answer to this question on this index version."""
        reason = f"approved by reviewer {reviewed.reviewer} (review {reviewed.review_id})"
        return self._result(
            ask, reviewed.answer, passages, reasons=[reason], review_id=reviewed.review_id
        )

    def _result(
        self,
        ask: _Ask,
        answer: str,
        passages: list[Passage],
        usage: Usage | None = None,
        *,
        abstain: str | None = None,
        decision: Action | None = None,
        reasons: list[str] | None = None,
        checked: Checked | None = None,
        samples: list[Sample] | None = None,
        verification: float | None = None,
        review_id: str | None = None,
    ) -> Result:
        ask.timings["total_s"] = time.perf_counter() - ask.started
        if decision is None:
            decision = Action.ABSTAIN if abstain is not None else Action.ANSWER
        result = Result(
            question=ask.question,
            answer=answer,
            citations=citations.attribute(answer, passages) if abstain is None else [],
            passages=passages,
            abstained=abstain is not None,
            abstain_reason=abstain,
            timings=dict(ask.timings),
            usage=usage or Usage(),
            model=self.engine.model_name,
            index=ask.index,
            request_id=ask.request_id,
            confidence=checked.confidence if checked is not None else None,
            decision=decision,
            decision_reasons=reasons if reasons is not None else ([abstain] if abstain else []),
            guard_results=checked.reports() if checked is not None else [],
            confidence_signals=checked.signals if checked is not None else {},
            samples=samples or [],
            verification=verification,
            judgement=checked.context.judgement
            if checked is not None and checked.context is not None
            else None,
            review_id=review_id,
            degraded=list(ask.degraded),
        )
        logs.note(
            question=ask.question,
            answer=answer,
            passages=len(passages),
            decision=decision.value,
            confidence=result.confidence,
            review_id=review_id,
            degraded=list(ask.degraded),
            prompt_tokens=result.usage.prompt_tokens,
            completion_tokens=result.usage.completion_tokens,
        )
        return result
