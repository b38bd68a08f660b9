"""One sequence's mutable state (its tokens, its KV blocks, where it is in its life) and the
request that groups a prompt's n sequences."""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field

import torch

from engine.beam_search import BeamSearch
from engine.outputs import FinishReason, RequestTiming
from engine.sampling_params import SamplingParams

_ids = itertools.count()


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(slots=True, eq=False)
class Sequence:
    """Prompt plus generated tokens of one completion; the scheduler's unit of work."""

    request_id: str
    index: int
    """Which of the request's n completions this is."""
    token_ids: list[int]
    num_prompt_tokens: int
    params: SamplingParams
    seq_id: int = field(default_factory=lambda: next(_ids))
    status: SequenceStatus = SequenceStatus.WAITING
    block_table: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    """Tokens whose keys and values are in the cache."""
    num_cached_tokens: int = 0
    """Of those, how many were found in the prefix cache instead of computed."""
    num_prompt_cached_tokens: int | None = None
    """Prompt tokens the prefix cache held when the sequence first got its blocks (kept when a
    preemption frees them)."""
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[dict[int, float]] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    stop_reason: str | int | None = None
    rng: torch.Generator | None = None
    """The sequence's own random number generator when the request has a seed."""
    draft_token_ids: list[int] = field(default_factory=list)
    """Guesses at the next tokens, computed in this step after the last real token and then
    accepted or rejected (speculative decoding); empty outside a step."""
    draft_probs: torch.Tensor | None = None
    """A draft model's distributions the ``draft_token_ids`` were drawn from, a row each (None
    for prompt lookup's guesses, proposed with certainty)."""
    num_model_draft_tokens: int = 0
    """Draft tokens the scheduler made room for this step, for the draft model to propose
    before the step runs."""
    shadow: Sequence | None = None
    """Context-aware decoding: this sequence's twin on the context-free prompt. It holds blocks
    of its own, is computed in the same steps (the scheduler moves them together) and takes the
    same generated tokens; its logits are contrasted with this sequence's."""
    is_shadow: bool = False
    """This is another sequence's ``shadow``: computed, never sampled from."""
    num_draft_computed_tokens: int = 0
    """Tokens whose keys and values are in the draft model's cache (which the sequence's block
    table pages as it pages the target's); it may lag ``num_computed_tokens``."""

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    @property
    def num_uncomputed_tokens(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens


@dataclass(slots=True)
class Request:
    """One generation request: its prompt, parameters, timing and its n sequences."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    params: SamplingParams
    timing: RequestTiming
    seqs: list[Sequence] = field(default_factory=list)

    aborted: bool = False
    beam: BeamSearch | None = None
    """Beam search state when the request asks for it (``seqs`` are then the running beams)."""

    @property
    def finished(self) -> bool:
        if self.beam is not None:
            return self.aborted or self.beam.done
        done = len(self.seqs) == self.params.n and all(s.is_finished for s in self.seqs)
        return self.aborted or done
