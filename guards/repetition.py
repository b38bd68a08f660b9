"""Repetition: repeated n-grams, loops at the end of a generation, degenerate outputs.

``is_looping`` is a pure function of token ids, cheap enough to run after every generated token,
so a generator can also use it as a stop check.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from guards.base import Candidate, Guard, GuardContext, GuardResult, Outcome
from guards.text import sentences

T = TypeVar("T")
_WORD = re.compile(r"\w+", re.UNICODE)


def tail_loop(
    items: Sequence[T], min_pattern: int = 1, max_pattern: int = 32, min_repeats: int = 4
) -> int:
    """Length of a pattern that ends ``items`` repeated back to back ``min_repeats`` times
    (0 when there is none). Shorter patterns need more repeats to count as a loop."""
    n = len(items)
    for size in range(min_pattern, max_pattern + 1):
        repeats_needed = max(min_repeats, 8 // size)  # "the the the" is not yet a loop
        if size * repeats_needed > n:
            break
        pattern = items[n - size :]
        if all(
            items[n - (k + 1) * size : n - k * size] == pattern for k in range(1, repeats_needed)
        ):
            return size
    return 0


def is_looping(
    token_ids: Sequence[int], min_pattern: int = 1, max_pattern: int = 32, min_repeats: int = 4
) -> bool:
    """Stop check: has the generation fallen into a loop?"""
    return tail_loop(list(token_ids), min_pattern, max_pattern, min_repeats) > 0


LOOP_STOP_REASON = "repetition loop"


@dataclass(frozen=True, slots=True)
class LoopStop:
    """A generator stop check (``SamplingParams.stop_check``): ends a completion whose tokens
    have fallen into a loop, with ``stop_reason`` "repetition loop". Only the last
    ``max_pattern * repeats`` tokens are looked at, so a call costs the same at any length."""

    min_pattern: int = 1
    max_pattern: int = 32
    min_repeats: int = 4

    def __call__(self, token_ids: Sequence[int]) -> str | None:
        window = max(self.min_repeats, 8) * self.max_pattern
        tail = list(token_ids[-window:])
        if tail_loop(tail, self.min_pattern, self.max_pattern, self.min_repeats):
            return LOOP_STOP_REASON
        return None


def repeated_ngrams(words: Sequence[str], n: int, min_count: int) -> dict[tuple[str, ...], int]:
    """N-grams occurring at least ``min_count`` times."""
    counts = Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))
    return {gram: c for gram, c in counts.items() if c >= min_count}


def repeated_share(words: Sequence[str], n: int, min_count: int) -> float:
    """Share of the words covered by n-grams that occur at least ``min_count`` times."""
    grams = repeated_ngrams(words, n, min_count)
    if not grams:
        return 0.0
    covered = [False] * len(words)
    for i in range(len(words) - n + 1):
        if tuple(words[i : i + n]) in grams:
            covered[i : i + n] = [True] * n
    return sum(covered) / len(words)


class RepetitionGuard(Guard):
    """FAIL on empty, cut-off, looping or self-repeating answers; score = 1 - repeated share."""

    name = "repetition"
    signals: ClassVar[Mapping[str, int]] = {"repetition_fail": -1}

    def __init__(
        self,
        *,
        ngram_size: int = 4,
        min_count: int = 3,
        max_repeated_share: float = 0.3,
        min_pattern: int = 1,
        max_pattern: int = 32,
        min_repeats: int = 4,
        fail_on_cutoff: bool = True,
    ):
        self.ngram_size = ngram_size
        self.min_count = min_count
        self.max_repeated_share = max_repeated_share
        self.min_pattern, self.max_pattern, self.min_repeats = min_pattern, max_pattern, min_repeats
        self.fail_on_cutoff = fail_on_cutoff

    def check(self, ctx: GuardContext) -> GuardResult:
        candidate = next((c for c in ctx.candidates if c.text == ctx.answer), Candidate(ctx.answer))
        words = [w.casefold() for w in _WORD.findall(candidate.text)]
        if not words:
            return GuardResult(
                self.name, Outcome.FAIL, 0.0, "the answer is empty", {}, {"repetition_fail": 1.0}
            )
        problems: list[str] = []
        share = repeated_share(words, self.ngram_size, self.min_count)
        if share > self.max_repeated_share:
            problems.append(
                f"{share:.0%} of the words are in {self.ngram_size}-grams "
                f"repeated {self.min_count}+ times"
            )
        loop = tail_loop(words, self.min_pattern, self.max_pattern, self.min_repeats)
        if loop:
            problems.append(f"it ends in a loop of a {loop}-word pattern")
        said = [" ".join(_WORD.findall(s.casefold())) for s in sentences(candidate.text)]
        repeated = [s for s, c in Counter(s for s in said if s).items() if c > 1]
        if repeated:
            problems.append(f"sentence repeated: {repeated[0][:60]!r}")
        if candidate.finish_reason == LOOP_STOP_REASON:
            problems.append("the generator stopped it in a loop")
        elif self.fail_on_cutoff and candidate.finish_reason == "length":
            problems.append("it was cut off at max_tokens")
        evidence = {
            "repeated_share": share,
            "loop_pattern_words": loop,
            "repeated_sentences": len(repeated),
        }
        if problems:
            return GuardResult(
                self.name,
                Outcome.FAIL,
                1.0 - share,
                "; ".join(problems),
                evidence,
                {"repetition_fail": 1.0},
            )
        return GuardResult(
            self.name,
            Outcome.PASS,
            1.0 - share,
            "no repetition found",
            evidence,
            {"repetition_fail": 0.0},
        )
