from __future__ import annotations

from pathlib import Path

from guards import Candidate, GuardContext, Outcome, RepetitionGuard, is_looping
from guards.repetition import LOOP_STOP_REASON, LoopStop, repeated_share, tail_loop


def check(text: str, finish_reason: str | None = "stop") -> tuple[Outcome, str]:
    ctx = GuardContext(
        question="q", answer=text, candidates=(Candidate(text, finish_reason=finish_reason),)
    )
    result = RepetitionGuard().check(ctx)
    return result.outcome, result.reason


def test_plain_answers_pass() -> None:
    answer = "A KV cache stores the keys and values of earlier tokens, so they are not recomputed at every step."
    assert check(answer)[0] is Outcome.PASS
    demo = Path(__file__).resolve().parents[2] / "rag" / "data" / "demo"
    long_answer = " ".join(
        p.read_text() for p in sorted(demo.glob("*.md"))[:3]
    )  # ~900 words of prose
    assert check(long_answer)[0] is Outcome.PASS


def test_loops_repeated_phrases_and_sentences_fail() -> None:
    outcome, reason = check("The answer is " + "very " * 12)
    assert outcome is Outcome.FAIL and "loop" in reason
    outcome, reason = check("It caches keys. It caches keys. Then it stops.")
    assert outcome is Outcome.FAIL and "sentence repeated" in reason
    text = "the cache stores keys and values " * 5 + "and more words follow here to end"
    assert check(text)[0] is Outcome.FAIL


def test_empty_cut_off_and_unicode() -> None:
    assert check("   ") == (Outcome.FAIL, "the answer is empty")
    outcome, reason = check("An answer that was still going when", finish_reason="length")
    assert outcome is Outcome.FAIL and "max_tokens" in reason
    assert check("缓存保存了之前的键和值。这样就不用重复计算。")[0] is Outcome.PASS
    outcome, _ = check("重复。重复。重复。")
    assert outcome is Outcome.FAIL


def test_loop_detection_on_token_ids_for_use_as_a_stop_check() -> None:
    assert is_looping([5, 6, 7] + [1, 2, 3] * 4)
    assert not is_looping([1, 2, 3, 1, 2, 3])  # two repeats are not a loop yet
    assert not is_looping(list(range(50)))
    assert tail_loop([9] * 8) == 1 and tail_loop([9] * 5) == 0  # one-token loops need 8
    assert repeated_share(["a", "b", "c", "d"], 2, 2) == 0.0


def test_loop_stop_check_and_a_generation_it_ended() -> None:
    stop = LoopStop()
    assert stop([5, 6, 7, 8]) is None
    assert stop(list(range(100)) + [1, 2] * 4) == LOOP_STOP_REASON
    assert stop([9] * 7) is None and stop([9] * 8) == LOOP_STOP_REASON  # one token needs 8
    assert stop(list(range(5000)) + [3, 4, 5] * 4) == LOOP_STOP_REASON  # only the tail is read
    outcome, reason = check("A FEW FEW FEW FEW", finish_reason=LOOP_STOP_REASON)
    assert outcome is Outcome.FAIL and "stopped it in a loop" in reason
