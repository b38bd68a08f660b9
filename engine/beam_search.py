"""Beam search over one request's beams: which continuations live on and which are finished.

The rule is ``transformers.generate(num_beams=k)``'s with its defaults (``early_stopping=False``):
each step takes the best ``max(2, 1 + #eos) * k`` continuations of all beams by summed
log-probability; those that end (an end-of-sequence token, or the length limit) and rank among
the first ``k`` become finished hypotheses scored ``sum / length ** length_penalty``; the best
``k`` that do not end are the next beams. Search stops when no beam can continue, or when every
one of the ``k`` finished slots is filled and the best beam, at its current length, no longer
scores above the worst of them. The engine keeps the beams as sequences that share their blocks
(``engine.output_processor``); this module only decides.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

_FAR_BELOW = -1.0e9
"""What transformers adds to a score to rule a candidate out."""


@dataclass(frozen=True, slots=True)
class Hypothesis:
    """A finished beam: its output tokens (the end-of-sequence token included, when it ended on
    one), their log-probabilities and its length-penalised score."""

    score: float
    token_ids: list[int]
    logprobs: list[float]
    ended_on_eos: bool


@dataclass(frozen=True, slots=True)
class Continuation:
    """A beam of the next step: ``parent``'s tokens plus ``token``, with its summed score."""

    parent: int
    token: int
    logprob: float
    score: float


@dataclass(slots=True)
class BeamSearch:
    width: int
    length_penalty: float
    eos_token_ids: list[int]
    prompt_len: int
    max_length: int
    """Prompt plus the most tokens any beam may reach."""
    scores: list[float] = field(default_factory=lambda: [0.0])
    """Summed log-probabilities of the running beams, in the engine's order of them."""
    finished: list[Hypothesis] = field(default_factory=list)
    improvable: bool = True
    done: bool = False

    def step(
        self, logits: torch.Tensor, outputs: list[list[int]], logprobs: list[list[float]]
    ) -> list[Continuation]:
        """Advance one token: ``logits`` (beams, vocab) of the running beams, whose output tokens
        and log-probabilities are ``outputs`` and ``logprobs``. Returns the next beams (empty
        when the search is done)."""
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        vocab = log_probs.shape[1]
        cur_len = self.prompt_len + len(outputs[0])
        scores = torch.tensor(self.scores, dtype=log_probs.dtype, device=log_probs.device)
        flat = (log_probs + scores[:, None]).flatten()
        keep = min(max(2, 1 + len(self.eos_token_ids)) * self.width, flat.numel())
        top_scores, top_index = flat.topk(keep)
        candidates = [
            (int(i) // vocab, int(i) % vocab, float(s))
            for s, i in zip(top_scores.tolist(), top_index.tolist(), strict=True)
        ]
        ends = [t in self.eos_token_ids or cur_len + 1 >= self.max_length for _, t, _ in candidates]
        if self.improvable:
            length = (cur_len + 1 - self.prompt_len) ** self.length_penalty
            new = [
                Hypothesis(
                    score / length,
                    outputs[beam] + [token],
                    logprobs[beam] + [float(log_probs[beam, token])],
                    token in self.eos_token_ids,
                )
                for rank, ((beam, token, score), end) in enumerate(
                    zip(candidates, ends, strict=True)
                )
                if end and rank < self.width
            ]
            merged = sorted(self.finished + new, key=lambda h: h.score, reverse=True)
            self.finished = merged[: self.width]
        running_scores = [
            s + _FAR_BELOW * end for (_, _, s), end in zip(candidates, ends, strict=True)
        ]
        order = sorted(range(len(candidates)), key=lambda i: running_scores[i], reverse=True)
        running = [
            Continuation(
                candidates[i][0],
                candidates[i][1],
                float(log_probs[candidates[i][0], candidates[i][1]]),
                running_scores[i],
            )
            for i in order[: self.width]
        ]
        # After this step the beams are one token longer.
        best = running[0].score / ((cur_len + 1 - self.prompt_len) ** self.length_penalty)
        if len(self.finished) < self.width:
            worst = _FAR_BELOW  # an empty slot can always be filled
        else:
            worst = min(h.score for h in self.finished)
        self.improvable = self.improvable and best > worst
        self.done = not self.improvable or all(ends)
        self.scores = [c.score for c in running]
        return [] if self.done else running

    def best(self, n: int) -> list[Hypothesis]:
        """The ``n`` best finished hypotheses, best first."""
        return self.finished[:n]
