"""Outputs of a generation request, shared by every generator (HF baseline and our engine)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field


class FinishReason(enum.StrEnum):
    """Why a completion ended."""

    STOP = "stop"  # end-of-sequence token, stop token id or stop string
    LENGTH = "length"  # reached max_tokens
    ABORT = "abort"  # cancelled by the caller


@dataclass(slots=True)
class RequestTiming:
    """Wall-clock marks of one request (seconds from ``time.perf_counter``)."""

    arrival_time: float
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finished_time: float | None = None
    token_times: list[float] = field(default_factory=list)

    @property
    def queue_time_s(self) -> float | None:
        """Time spent waiting before the request was first run."""
        if self.first_scheduled_time is None:
            return None
        return self.first_scheduled_time - self.arrival_time

    @property
    def time_to_first_token_s(self) -> float | None:
        """Arrival to first generated token."""
        if self.first_token_time is None:
            return None
        return self.first_token_time - self.arrival_time

    @property
    def inter_token_latencies_s(self) -> list[float]:
        """Gaps between consecutive generated tokens."""
        return [b - a for a, b in zip(self.token_times, self.token_times[1:], strict=False)]

    @property
    def e2e_latency_s(self) -> float | None:
        """Arrival to the last token."""
        if self.finished_time is None:
            return None
        return self.finished_time - self.arrival_time

    def to_dict(self) -> dict[str, float | None]:
        """Summary figures, for logs and HTTP responses."""
        itl = self.inter_token_latencies_s
        return {
            "queue_time_s": self.queue_time_s,
            "time_to_first_token_s": self.time_to_first_token_s,
            "mean_inter_token_latency_s": sum(itl) / len(itl) if itl else None,
            "e2e_latency_s": self.e2e_latency_s,
        }


@dataclass(slots=True)
class CompletionOutput:
    """One sampled completion of a prompt."""

    index: int
    text: str
    token_ids: list[int]
    logprobs: list[float]
    """Log-probability of each chosen token under the model's raw (unwarped) distribution."""
    finish_reason: FinishReason | None = None
    stop_reason: str | int | None = None
    """The stop string or stop token id that ended the completion, if any."""
    top_logprobs: list[dict[int, float]] | None = None
    """Per token, the most likely alternatives and their log-probabilities (if requested)."""

    @property
    def cumulative_logprob(self) -> float:
        """Sum of the chosen tokens' log-probabilities."""
        return float(sum(self.logprobs))

    @property
    def mean_logprob(self) -> float | None:
        """Average chosen-token log-probability (None for an empty completion)."""
        return self.cumulative_logprob / len(self.logprobs) if self.logprobs else None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(slots=True)
class RequestOutput:
    """The state of one request: its prompt and its ``n`` completions."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    timing: RequestTiming
    num_cached_tokens: int = 0
    """Prompt tokens whose KV came from the prefix cache instead of being computed."""
    num_reported_prompt_tokens: int | None = None
    """The prompt's length as a remote generator reported it (its ids may be unknown here)."""

    @property
    def num_prompt_tokens(self) -> int:
        if self.num_reported_prompt_tokens is not None:
            return self.num_reported_prompt_tokens
        return len(self.prompt_token_ids)

    @property
    def num_completion_tokens(self) -> int:
        return sum(len(o.token_ids) for o in self.outputs)


def streamable_text(text: str, stops: Sequence[str] = ()) -> str:
    """The part of an unfinished completion's text that is safe to stream: without a trailing
    partial character (U+FFFD) nor a trailing piece that could grow into a stop string (the
    engine cuts the stop string off when it completes)."""
    text = text.rstrip("\ufffd")
    hold = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), hold, -1):
            if text.endswith(stop[:size]):
                hold = size
                break
    return text[: len(text) - hold]
