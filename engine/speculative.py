"""Prompt-lookup speculative decoding: draft tokens copied from the sequence itself.

A grounded answer copies spans of the passages in its prompt. When the newest tokens of a
sequence (an n-gram) also occur earlier in its prompt or output, the tokens that followed that
earlier occurrence are a cheap guess at what comes next. The engine computes the real next token
and the guesses in one forward pass of ``1 + k`` positions; the accepted guesses cost no step of
their own. See ``engine.layers.sampler.verify_draft`` for the acceptance rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


@dataclass(frozen=True, slots=True)
class PromptLookup:
    """Proposes up to ``num_tokens`` draft tokens from the longest recent n-gram match."""

    num_tokens: int = 6
    """Draft length k: at most this many guesses per step."""
    max_ngram: int = 3
    """Longest suffix searched for first."""
    min_ngram: int = 2
    """Shortest suffix that still counts as a match."""

    def __post_init__(self) -> None:
        if self.num_tokens < 1:
            raise ValueError(f"num_speculative_tokens must be >= 1, got {self.num_tokens}")
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise ValueError(
                "prompt lookup needs 1 <= min n-gram <= max n-gram, "
                f"got {self.min_ngram} and {self.max_ngram}"
            )

    def propose(self, token_ids: list[int], limit: int) -> list[int]:
        """Draft tokens to follow ``token_ids`` (at most ``limit``): the tokens after the most
        recent earlier occurrence of the longest suffix of ``max_ngram`` .. ``min_ngram``
        tokens; none when no suffix recurs."""
        limit = min(limit, self.num_tokens)
        length = len(token_ids)
        if limit < 1 or length < self.min_ngram + 1:
            return []
        tokens = np.asarray(token_ids, dtype=np.int64)
        for n in range(min(self.max_ngram, length - 1), self.min_ngram - 1, -1):
            suffix = tokens[length - n :]
            # Windows that start before the suffix itself and leave a token to copy after them.
            windows = sliding_window_view(tokens[: length - 1], n)
            starts = np.flatnonzero((windows == suffix).all(axis=1))
            if starts.size:
                follow = int(starts[-1]) + n
                draft: list[int] = tokens[follow : follow + limit].tolist()
                return draft
        return []
