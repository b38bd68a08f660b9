"""The repetition guard and the engine's loop stop check on prompts that make the default model
loop with its penalties off (labelled by ``loops_by_oracle``), and the guard's flags on the demo
questions, where it should raise none."""

from __future__ import annotations

from typing import Any

from benchmarks.research.guard_sets import LOOP_PROMPTS, loops_by_oracle
from engine import Generator, SamplingParams
from guards import Candidate, GuardContext, LoopStop, Outcome, RepetitionGuard
from rag.demo import DEMO_QUESTIONS
from rag.pipeline import Pipeline

MAX_TOKENS = 160


def demo_flags(pipeline: Pipeline) -> list[str]:
    """The demo questions whose answer the repetition guard failed, with its reason."""
    flags = []
    for question in DEMO_QUESTIONS:
        result = pipeline.ask(question)
        rep = next((g for g in result.guard_results if g.name == "repetition"), None)
        if rep is not None and rep.outcome == "fail":
            flags.append(f"{question} -> {rep.reason}")
    return flags


def run_repetition(generator: Generator, demo_pipeline: Pipeline | None) -> dict[str, Any]:
    """The ``repetition`` section: each loop prompt generated freely and with ``LoopStop``;
    recall of the guard (on the free text) and of the stop check on the loops."""
    prompts = [
        generator.apply_chat_template([{"role": "user", "content": p}]) for p in LOOP_PROMPTS
    ]
    free = generator.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS))
    stopped = generator.generate(
        prompts, SamplingParams(max_tokens=MAX_TOKENS, stop_check=LoopStop())
    )
    guard = RepetitionGuard()
    loops = flagged = stop_hits = 0
    tokens_free = tokens_stopped = 0
    false_flags = 0
    for out, early in zip(free, stopped, strict=True):
        c, e = out.outputs[0], early.outputs[0]
        label = loops_by_oracle(c.token_ids, MAX_TOKENS)
        ctx = GuardContext("q", c.text, candidates=(Candidate(c.text, (), str(c.finish_reason)),))
        fail = guard.check(ctx).outcome is Outcome.FAIL
        loops += label
        flagged += label and fail
        false_flags += (not label) and fail
        stop_hits += label and e.stop_reason == "repetition loop"
        if label:
            tokens_free += len(c.token_ids)
            tokens_stopped += len(e.token_ids)
    return {
        "num_prompts": len(prompts),
        "loops_by_oracle": loops,
        "guard_recall": flagged / loops if loops else float("nan"),
        "guard_flags_on_non_loops": false_flags,
        "stop_check_recall": stop_hits / loops if loops else float("nan"),
        "loop_tokens_saved_by_stop_check": 1 - tokens_stopped / tokens_free if tokens_free else 0.0,
        "demo_questions": len(DEMO_QUESTIONS) if demo_pipeline is not None else 0,
        "demo_flags": demo_flags(demo_pipeline) if demo_pipeline is not None else [],
    }
