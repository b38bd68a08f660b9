"""``Pipeline.ask``: retrieve passages, generate a grounded answer, cite its sources."""

from __future__ import annotations

import logging
import os
import time
import uuid
from dataclasses import dataclass, replace

from engine import EngineConfig, Generator, SamplingParams, build_generator
from guards import Action, LoopStop, Policy
from guards.review import CachedAnswer
from rag import citations
from rag.collection import CollectionRegistry
from rag.embed import Embedder
from rag.errors import InvalidInputError
from rag.guarding import AnswerChecker, Checked, finish_reason
from rag.prompt import NO_ANSWER, build_messages
from rag.retriever import VectorRetriever
from rag.reviews import index_version, open_review_store
from rag.settings import Settings
from rag.types import Passage, Result, Sample, Usage
from rag.verification import SelfVerifier

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AskOptions:
    """Per-question options; None falls back to the pipeline's settings."""

    index: str | None = None
    top_k: int | None = None
    min_score: float | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    seed: int | None = None
    abstain_below: float | None = None
    """Confidence under which this answer is withheld (overrides the policy's threshold)."""
    review_below: float | None = None
    """Confidence under which this answer goes to a reviewer (overrides the policy's)."""


class Pipeline:
    """Grounded question answering over the collections of one index folder."""

    def __init__(self, settings: Settings, embedder: Embedder, generator: Generator):
        self.settings = settings
        self.embedder = embedder
        self.generator = generator
        self.collections = CollectionRegistry.from_settings(settings, embedder)
        self.reviews = open_review_store(settings)
        self.checker = (
            AnswerChecker(settings, embedder, self.reviews) if settings.guards_enabled else None
        )
        self.verifier = (
            SelfVerifier(generator)
            if self.checker is not None and settings.self_verification
            else None
        )

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> Pipeline:
        """Load the embedding model and the generator named by the settings (offline by default)."""
        settings = settings or Settings()
        if not settings.allow_hub:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        config = EngineConfig(
            model=settings.model,
            dtype=settings.dtype,
            device=settings.device,
            max_num_seqs=settings.max_batch_size,
            max_num_batched_tokens=settings.max_num_batched_tokens,
            kv_cache_memory_bytes=settings.kv_cache_memory_mb << 20,
            reserve_max_tokens=settings.reserve_max_tokens,
            cuda_graphs=settings.cuda_graphs,
            cache_dir=settings.model_cache_dir,
            allow_hub=settings.allow_hub,
        )
        embedder = Embedder(
            settings.embedding_model, device=config.resolved_device(), allow_hub=settings.allow_hub
        )
        return cls(settings, embedder, build_generator(config, settings.generator))

    def close(self) -> None:
        self.collections.close()
        self.reviews.close()

    def ask(self, question: str, **options: object) -> Result:
        """Answer ``question`` from the index, with citations; options: ``AskOptions`` fields."""
        try:
            opts = AskOptions(**options)  # type: ignore[arg-type]
        except TypeError as exc:
            raise InvalidInputError(f"unknown option: {exc}") from exc
        return self.ask_with(question, opts)

    def ask_with(
        self, question: str, options: AskOptions, *, request_id: str | None = None
    ) -> Result:
        """``ask`` with the options as one object; ``request_id`` ties logs to the caller's id."""
        s = self.settings
        question = question.strip()
        if not question:
            raise InvalidInputError("the question is empty")
        if len(question) > s.max_question_chars:
            raise InvalidInputError(
                f"the question has {len(question)} characters; "
                f"at most {s.max_question_chars} are allowed"
            )
        index_name = options.index or s.index_name
        top_k = s.top_k if options.top_k is None else options.top_k
        min_score = s.min_score if options.min_score is None else options.min_score
        params = self._sampling_params(options)
        policy = self._policy(options)
        request_id = request_id or uuid.uuid4().hex
        started = time.perf_counter()
        collection = self.collections.get(index_name)
        retrieved = VectorRetriever(collection).retrieve(question, top_k)
        timings = {"retrieve_s": time.perf_counter() - started}
        version = index_version(collection)  # read after the search has caught up with writes
        reviewed = self.reviews.cached_answer(question, index_name, version)
        if reviewed is not None:
            return self._reviewed(request_id, question, reviewed, timings, started, index_name)
        passages = [p for p in retrieved if p.score >= min_score]
        if not passages:
            best = max((p.score for p in retrieved), default=None)
            reason: str | None = (
                "no passage is relevant enough to answer "
                f"(best score {best:.3f} < min_score {min_score})"
                if best is not None
                else "the index holds no passages"
            )
            timings["total_s"] = time.perf_counter() - started
            return self._result(
                request_id, question, NO_ANSWER, [], reason, timings, Usage(), index_name
            )

        prompt = self._fit_prompt(question, passages, params[0].max_tokens)
        gen_started = time.perf_counter()
        outputs = self.generator.generate([prompt] * len(params), params)
        completion = outputs[0].outputs[0]
        samples = [c for o in outputs for c in o.outputs]
        timings["generate_s"] = time.perf_counter() - gen_started
        if (ttft := outputs[0].timing.time_to_first_token_s) is not None:
            timings["time_to_first_token_s"] = ttft
        answer = completion.text.strip()
        usage = Usage(outputs[0].num_prompt_tokens, sum(o.num_completion_tokens for o in outputs))
        if citations.is_declined(answer):
            timings["total_s"] = time.perf_counter() - started
            reason = "the model found no answer in the passages"
            return self._result(
                request_id, question, NO_ANSWER, passages, reason, timings, usage, index_name
            )
        checked, verification = None, None
        if self.checker is not None:
            if self.verifier is not None:
                verify_started = time.perf_counter()
                verification = self.verifier.score(question, passages, answer)
                timings["verify_s"] = time.perf_counter() - verify_started
            guards_started = time.perf_counter()
            checked = self.checker.check(
                question, completion, samples, passages, policy=policy, verification=verification
            )
            timings["guards_s"] = time.perf_counter() - guards_started
        timings["total_s"] = time.perf_counter() - started
        result = self._result(
            request_id, question, answer, passages, None, timings, usage, index_name
        )
        if checked is None:
            return result
        result = replace(
            result,
            samples=[Sample(c.text.strip(), list(c.logprobs), finish_reason(c)) for c in samples],
            verification=verification,
        )
        return self._apply(result, checked, [c.text.strip() for c in samples], version)

    def _sampling_params(self, options: AskOptions) -> list[SamplingParams]:
        """The answer's parameters, then (with ``num_candidates`` > 1) those of the extra samples
        the guards compare it with: one request each, sharing the prompt's KV blocks."""
        s = self.settings
        temperature = s.temperature if options.temperature is None else options.temperature
        try:
            answer = SamplingParams(
                temperature=temperature,
                max_tokens=s.max_tokens if options.max_tokens is None else options.max_tokens,
                seed=options.seed,
                stop_check=LoopStop() if s.stop_on_loop else None,
            )
            if s.num_candidates == 1:
                return [answer]
            seed = None if options.seed is None else options.seed + 1
            samples = replace(
                answer,
                n=s.num_candidates - 1,
                temperature=s.candidate_temperature,
                max_tokens=min(answer.max_tokens, s.candidate_max_tokens),
                seed=seed,
            )
            return [answer, samples]
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from exc

    def _policy(self, options: AskOptions) -> Policy | None:
        """The checker's policy with this request's thresholds, validated before any work."""
        if self.checker is None or (options.abstain_below is None and options.review_below is None):
            return None
        try:
            return replace(
                self.checker.policy,
                abstain_below=self.checker.policy.abstain_below
                if options.abstain_below is None
                else options.abstain_below,
                review_below=self.checker.policy.review_below
                if options.review_below is None
                else options.review_below,
            )
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from exc

    def _reviewed(
        self,
        request_id: str,
        question: str,
        reviewed: CachedAnswer,
        timings: dict[str, float],
        started: float,
        index_name: str,
    ) -> Result:
        """A reviewer's approved (or edited) answer to this question on this index version."""
        timings["total_s"] = time.perf_counter() - started
        passages = [Passage(**p) for p in reviewed.passages]
        result = self._result(
            request_id, question, reviewed.answer, passages, None, timings, Usage(), index_name
        )
        reason = f"approved by reviewer {reviewed.reviewer} (review {reviewed.review_id})"
        return replace(
            result,
            decision=Action.ANSWER.value,
            decision_reasons=[reason],
            review_id=reviewed.review_id,
        )

    def _apply(
        self, result: Result, checked: Checked, candidates: list[str], version: str
    ) -> Result:
        """Attach the guards' verdicts and act on the decision."""
        decision = checked.decision
        result = replace(
            result,
            confidence=checked.confidence,
            decision=decision.action.value,
            decision_reasons=decision.reasons,
            guard_results=checked.verdicts(),
            confidence_signals=checked.signals,
        )
        if decision.action is Action.ABSTAIN:
            reason = "; ".join(decision.reasons)
            return replace(
                result, answer=NO_ANSWER, citations=[], abstained=True, abstain_reason=reason
            )
        if decision.action is Action.REVIEW:
            assert self.checker is not None
            review_id = self.checker.queue_for_review(
                result.question,
                result.answer,
                checked,
                result.passages,
                candidates=candidates,
                index_name=result.index,
                index_version=version,
                request_id=result.request_id,
            )
            return replace(result, review_id=review_id)
        return result

    def _fit_prompt(self, question: str, passages: list[Passage], max_tokens: int) -> str:
        """The grounded prompt, dropping the least relevant passages (in place) until the prompt
        and the answer fit the model's context window."""
        room = self.generator.max_model_len - max_tokens
        while True:
            prompt = self.generator.apply_chat_template(build_messages(question, passages))
            if self.generator.count_tokens(prompt) <= room:
                return prompt
            if len(passages) == 1:
                raise InvalidInputError(
                    f"the question and its best passage do not fit the model's "
                    f"{self.generator.max_model_len}-token context with max_tokens={max_tokens}"
                )
            passages.pop()

    def _result(
        self,
        request_id: str,
        question: str,
        answer: str,
        passages: list[Passage],
        abstain_reason: str | None,
        timings: dict[str, float],
        usage: Usage,
        index_name: str,
    ) -> Result:
        logger.info(
            "request %s: index=%s passages=%d abstained=%s total=%.2fs",
            request_id,
            index_name,
            len(passages),
            abstain_reason is not None,
            timings["total_s"],
        )
        return Result(
            question=question,
            answer=answer,
            citations=citations.attribute(answer, passages) if abstain_reason is None else [],
            passages=passages,
            abstained=abstain_reason is not None,
            abstain_reason=abstain_reason,
            decision="abstain" if abstain_reason is not None else "answer",
            decision_reasons=[abstain_reason] if abstain_reason is not None else [],
            timings=timings,
            usage=usage,
            model=self.generator.model_name,
            index=index_name,
            request_id=request_id,
        )
