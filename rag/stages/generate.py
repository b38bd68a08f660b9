"""Generate: the grounded prompt, then the answer (streamed) and the samples the guards compare it
with, as concurrent requests to the engine client sharing the prompt's KV blocks."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from engine import (
    CompletionOutput,
    EngineClient,
    RequestOutput,
    SamplingParams,
    generate_all,
    streamable_text,
)
from guards import LoopStop
from rag import logs
from rag.errors import InvalidInputError
from rag.prompt import PassageLayout, build_messages
from rag.settings import Settings
from rag.types import AskOptions, Passage, Usage


@dataclass(frozen=True, slots=True)
class Plan:
    """What will be generated: the prompt, the passages it shows, the sampling parameters."""

    prompt: str
    passages: list[Passage]
    """Those that fit the context window, numbered from 1 in this order (``passage_order``)."""
    answer: SamplingParams
    samples: SamplingParams | None
    """The extra samples (``num_candidates`` - 1 of them), if any."""


@dataclass(frozen=True, slots=True)
class Generation:
    """The generated answer and every completion the guards will look at."""

    answer: CompletionOutput
    completions: list[CompletionOutput]
    """The answer first, then the extra samples."""
    usage: Usage
    generate_s: float
    time_to_first_token_s: float | None
    queue_s: float | None
    """The answer request's wait for the engine's first step."""

    def timings(self) -> dict[str, float]:
        """``generate_s``, then ``time_to_first_token_s`` and ``queue_s`` when known."""
        found = {
            "time_to_first_token_s": self.time_to_first_token_s,
            "queue_s": self.queue_s,
        }
        return {"generate_s": self.generate_s, **{k: v for k, v in found.items() if v is not None}}


class GenerateStage:
    """Builds the plan and runs it on the engine client."""

    def __init__(self, engine: EngineClient, settings: Settings):
        self.engine = engine
        self.settings = settings
        self.layout = PassageLayout(settings.generation.passage_order)

    def plan(self, question: str, passages: list[Passage], options: AskOptions) -> Plan:
        """Validated sampling parameters and a prompt that fits the context window."""
        answer, samples = self._sampling_params(options)
        logs.note(
            temperature=answer.temperature,
            max_tokens=answer.max_tokens,
            seed=answer.seed,
            samples=0 if samples is None else samples.n,
            sample_temperature=None if samples is None else samples.temperature,
        )
        prompt, shown = self._fit_prompt(question, list(passages), answer.max_tokens)
        if self.settings.engine.decoding == "context_aware":
            # Context-aware decoding contrasts the prompt with the same one without passages.
            free = self.engine.apply_chat_template(
                build_messages(question, [], self.settings.effective_system_prompt())
            )
            answer = replace(answer, context_free_prompt=free)
            samples = None if samples is None else replace(samples, context_free_prompt=free)
        return Plan(prompt, shown, answer, samples)

    async def stream(self, plan: Plan, request_id: str) -> AsyncIterator[str | Generation]:
        """The answer's text as it grows (deltas), then the ``Generation``. Leaving early
        (cancellation, a client that went away) aborts both requests and frees their blocks."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        tag = uuid.uuid4().hex[:8]  # engine ids stay unique when a caller reuses its request id
        samples_task = (
            asyncio.create_task(
                generate_all(self.engine, plan.prompt, plan.samples, f"{request_id}-s-{tag}")
            )
            if plan.samples is not None
            else None
        )
        try:
            final: RequestOutput | None = None
            sent = ""
            stream = self.engine.generate(plan.prompt, plan.answer, f"{request_id}-{tag}")
            async for output in stream:
                final = output
                text = output.outputs[0].text
                if not output.finished:
                    text = streamable_text(text, plan.answer.stop)
                if not sent:
                    text = text.lstrip()
                if len(text) > len(sent) and text.startswith(sent):
                    yield text[len(sent) :]
                    sent = text
            assert final is not None and final.finished
            extra = await samples_task if samples_task is not None else None
        finally:
            if samples_task is not None and not samples_task.done():
                samples_task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await samples_task
        completions = [*final.outputs, *(extra.outputs if extra is not None else [])]
        outputs = [final, *([extra] if extra is not None else [])]
        yield Generation(
            answer=final.outputs[0],
            completions=completions,
            usage=Usage(
                final.num_prompt_tokens,
                sum(o.num_completion_tokens for o in outputs),
                final.num_cached_tokens,
            ),
            generate_s=loop.time() - started,
            time_to_first_token_s=final.timing.time_to_first_token_s,
            queue_s=final.timing.queue_time_s,
        )

    def _sampling_params(self, options: AskOptions) -> tuple[SamplingParams, SamplingParams | None]:
        """The answer's parameters, then (with ``num_candidates`` > 1) those of the extra samples
        the guards compare it with: one request each, sharing the prompt's KV blocks."""
        s = self.settings
        temperature = (
            s.generation.temperature if options.temperature is None else options.temperature
        )
        try:
            answer = SamplingParams(
                temperature=temperature,
                max_tokens=s.generation.max_tokens
                if options.max_tokens is None
                else options.max_tokens,
                seed=options.seed,
                stop_check=LoopStop() if s.guards.stop_on_loop else None,
            )
            if s.guards.num_candidates == 1:
                return answer, None
            samples = replace(
                answer,
                n=s.guards.num_candidates - 1,
                temperature=s.guards.candidate_temperature,
                max_tokens=min(answer.max_tokens, s.guards.candidate_max_tokens),
                seed=None if options.seed is None else options.seed + 1,
                stop_check=LoopStop() if s.guards.stop_on_loop else None,
            )
            return answer, samples
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from exc

    def _fit_prompt(
        self, question: str, passages: list[Passage], max_tokens: int
    ) -> tuple[str, list[Passage]]:
        """The grounded prompt and the passages it shows, in the prompt's order: ``passages``
        come best first, and the least relevant are dropped until the prompt and the answer fit
        the model's context window."""
        engine = self.engine
        room = engine.max_model_len - max_tokens
        while True:
            shown = self.layout.arrange(passages)
            prompt = engine.apply_chat_template(
                build_messages(question, shown, self.settings.effective_system_prompt())
            )
            if engine.count_tokens(prompt) <= room:
                self.layout.remember(shown)
                return prompt, shown
            if len(passages) == 1:
                raise InvalidInputError(
                    f"the question and its best passage do not fit the model's "
                    f"{engine.max_model_len}-token context with max_tokens={max_tokens}"
                )
            passages = passages[:-1]
