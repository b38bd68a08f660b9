"""Prompt-lookup speculative decoding: the proposer, the acceptance rule, and the engine giving
exactly its non-speculative tokens (greedy) or the same distribution (sampling)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.layers.sampler import SampleRow, verify_draft
from engine.speculative import PromptLookup

DEMO = Path(__file__).resolve().parents[2] / "rag" / "data" / "demo"
QUESTIONS = [
    ("kv-cache.md", "What does a KV cache avoid recomputing, and why does it matter?"),
    ("speculative-decoding.md", "How does speculative decoding speed up generation?"),
    ("quantization.md", "What does quantization trade away?"),
    ("batching.md", "What is continuous batching?"),
    ("beam-search.md", "How does beam search choose its output?"),
]


def rag_prompt(engine: LLMEngine, doc: str, question: str) -> str:
    passage = (DEMO / doc).read_text(encoding="utf-8")[:1200]
    content = f"Answer from the passage, quoting it.\n\n{passage}\n\nQuestion: {question}"
    return engine.apply_chat_template([{"role": "user", "content": content}])


# ---------------------------------------------------------------------------- the proposer
def test_the_longest_most_recent_ngram_match_is_proposed() -> None:
    lookup = PromptLookup(num_tokens=3, max_ngram=3, min_ngram=1)
    #         0  1  2  3  4  5  6  7  8  9 10 11
    tokens = [5, 6, 7, 8, 9, 1, 6, 7, 2, 3, 6, 7]
    # Suffix [6, 7]: its latest earlier occurrence (index 6) is followed by 2, 3, 6.
    assert lookup.propose(tokens, 10) == [2, 3, 6]
    # The 3-gram [2, 6, 7] has no earlier occurrence; the 2-gram [6, 7] at index 1 is followed
    # by 8, 2, 6.
    assert lookup.propose([5, 6, 7, 8, 2, 6, 7], 10) == [8, 2, 6]
    assert lookup.propose(tokens, 2) == [2, 3]  # the step's limit
    assert lookup.propose([1, 2, 3, 4], 5) == []  # nothing recurs
    assert lookup.propose([4], 5) == []
    assert lookup.propose([3, 3], 5) == [3]  # a repeated token predicts itself
    assert PromptLookup(num_tokens=4, min_ngram=2).propose([1, 2, 9, 2], 4) == []


def test_bad_prompt_lookup_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        EngineConfig(speculative="prompt_lookup", num_speculative_tokens=0)
    with pytest.raises(ValueError, match="min n-gram"):
        EngineConfig(speculative="prompt_lookup", prompt_lookup_min=3, prompt_lookup_max=2)
    with pytest.raises(ValueError, match="speculative must be one of"):
        EngineConfig(speculative="medusa")


# ----------------------------------------------------------------------- the acceptance rule
def _rows(
    params: SamplingParams, draft: list[int], generator: torch.Generator | None = None
) -> list[SampleRow]:
    return [SampleRow(params, [1, 2], draft[:j], generator) for j in range(len(draft) + 1)]


def test_greedy_verification_keeps_the_agreeing_prefix_and_the_argmax_after_it() -> None:
    logits = torch.full((4, 6), -5.0)
    for row, best in enumerate([3, 4, 0, 2]):
        logits[row, best] = 5.0
    params = SamplingParams(logprobs=2)
    assert verify_draft(logits, _rows(params, [3, 4, 1]), [3, 4, 1]).token_ids == [3, 4, 0]
    assert verify_draft(logits, _rows(params, [1, 4, 0]), [1, 4, 0]).token_ids == [3]
    every = verify_draft(logits, _rows(params, [3, 4, 0]), [3, 4, 0])
    assert every.token_ids == [3, 4, 0, 2]
    expected = torch.log_softmax(logits, dim=-1)
    assert every.logprobs == pytest.approx(
        [float(expected[i, t]) for i, t in enumerate([3, 4, 0, 2])]
    )
    second = every.top_logprobs[1]
    assert second is not None and max(second, key=second.__getitem__) == 4
    with pytest.raises(ValueError, match="one row of logits per draft token"):
        verify_draft(logits[:2], _rows(params, [3, 4, 0]), [3, 4, 0])


def test_greedy_verification_applies_penalties_as_if_the_drafts_were_accepted() -> None:
    # Token 2 leads everywhere, but the penalty of a sequence that already holds it flips the
    # second row to token 3: the draft [2, 2] is accepted only up to that point.
    logits = torch.tensor([[0.0, 0.0, 2.0, 1.5], [0.0, 0.0, 2.0, 1.5], [0.0, 0.0, 2.0, 1.5]])
    params = SamplingParams(repetition_penalty=2.0)
    rows = [SampleRow(params, [0], [2, 2][:j], None) for j in range(3)]
    assert verify_draft(logits, rows, [2, 2]).token_ids == [2, 3]


@pytest.mark.slow
def test_speculative_sampling_leaves_the_distribution_unchanged() -> None:
    """A fixed seed and 20,000 draws: the first token follows p0 and, when the draft's first
    token is kept, the second follows p1, each within 0.015 of the exact probability."""
    p = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.25, 0.25, 0.5]])
    logits = p.log()
    params = SamplingParams(temperature=1.0)
    generator = torch.Generator().manual_seed(1234)
    draft = [0, 2]
    first: Counter[int] = Counter()
    second: Counter[int] = Counter()
    trials = 20_000
    for _ in range(trials):
        tokens = verify_draft(logits, _rows(params, draft, generator), draft).token_ids
        first[tokens[0]] += 1
        if tokens[0] == draft[0]:
            second[tokens[1]] += 1
    for token in range(3):
        assert first[token] / trials == pytest.approx(float(p[0, token]), abs=0.015)
        kept = sum(second.values())
        assert second[token] / kept == pytest.approx(float(p[1, token]), abs=0.015)


# ------------------------------------------------------------------------------- the engine
@pytest.fixture(scope="module")
def spec_engine() -> LLMEngine:
    return LLMEngine(
        EngineConfig(
            device="cpu",
            kv_cache_memory_bytes=96 << 20,
            speculative="prompt_lookup",
            speculative_max_seqs=8,
        )
    )


@pytest.mark.slow  # 35 s: the default tier keeps shorter equivalence checks
def test_greedy_speculation_gives_exactly_the_tokens_of_plain_decoding(
    spec_engine: LLMEngine, llm_engine: LLMEngine
) -> None:
    prompts = [rag_prompt(llm_engine, doc, q) for doc, q in QUESTIONS]
    params = SamplingParams(max_tokens=48, logprobs=1)
    expected = llm_engine.generate(prompts, params)
    before = spec_engine.stats()
    # One at a time, then all five in one batch (drafting and plain rows in the same steps).
    alone = [spec_engine.generate([p], params)[0] for p in prompts]
    together = spec_engine.generate(prompts, params)
    for ref, a, b in zip(expected, alone, together, strict=True):
        assert a.outputs[0].token_ids == ref.outputs[0].token_ids
        assert b.outputs[0].token_ids == ref.outputs[0].token_ids
        assert a.outputs[0].text == ref.outputs[0].text
        assert a.outputs[0].logprobs == pytest.approx(ref.outputs[0].logprobs, abs=1e-3)
        assert len(a.timing.token_times) == len(a.outputs[0].token_ids)
    stats = spec_engine.stats()
    drafted = stats.num_draft_tokens - before.num_draft_tokens
    accepted = stats.num_accepted_tokens - before.num_accepted_tokens
    assert 0 < accepted < drafted  # some guesses kept, some rolled back
    assert spec_engine.block_manager.num_used_blocks == 0  # every rejected slot given back


@pytest.mark.slow  # 16 s
def test_speculation_with_prefix_cache_off_n_samples_and_preemption(
    llm_engine: LLMEngine,
) -> None:
    prompts = [rag_prompt(llm_engine, doc, q) for doc, q in QUESTIONS[:4]]
    params = SamplingParams(max_tokens=32, ignore_eos=True)
    expected = [o.outputs[0].token_ids for o in llm_engine.generate(prompts, params)]
    per_block = 2 * 30 * 16 * 3 * 64 * 4
    tight = LLMEngine(
        EngineConfig(
            device="cpu",
            max_num_seqs=4,
            kv_cache_memory_bytes=per_block * 93,  # the four prompts fill 91 blocks
            enable_prefix_caching=False,
            reserve_max_tokens=False,
            speculative="prompt_lookup",
        )
    )
    got = [o.outputs[0].token_ids for o in tight.generate(prompts, params)]
    assert tight.scheduler.num_preemptions > 0
    assert tight.stats().num_accepted_tokens > 0
    assert got == expected
    # Three greedy samples forked from one prompt draft on their shared blocks (copy on write).
    forked = tight.generate(prompts[:1], SamplingParams(n=3, max_tokens=32, ignore_eos=True))[0]
    assert [c.token_ids for c in forked.outputs] == [expected[0]] * 3
    assert tight.block_manager.num_used_blocks == 0


def test_speculation_stops_at_stop_strings_and_max_tokens(
    spec_engine: LLMEngine, llm_engine: LLMEngine
) -> None:
    prompt = rag_prompt(llm_engine, *QUESTIONS[0])
    reference = llm_engine.generate([prompt], SamplingParams(max_tokens=40))[0].outputs[0]
    words = reference.text.split()
    stop = " ".join(words[6:8])
    for params in (SamplingParams(max_tokens=13), SamplingParams(max_tokens=40, stop=[stop])):
        ref = llm_engine.generate([prompt], params)[0].outputs[0]
        got = spec_engine.generate([prompt], params)[0].outputs[0]
        assert (got.token_ids, got.text, got.finish_reason) == (
            ref.token_ids,
            ref.text,
            ref.finish_reason,
        )


def test_speculation_switches_itself_off_when_many_sequences_decode(llm_engine: LLMEngine) -> None:
    engine = LLMEngine(
        EngineConfig(
            device="cpu",
            kv_cache_memory_bytes=64 << 20,
            speculative="prompt_lookup",
            speculative_max_seqs=2,
        )
    )
    prompts = [rag_prompt(llm_engine, doc, q) for doc, q in QUESTIONS[:3]]
    engine.generate(prompts, SamplingParams(max_tokens=8, ignore_eos=True))
    stats = engine.stats()
    assert stats.num_steps_without_speculation >= 6
    assert stats.num_draft_tokens == 0


@pytest.mark.slow
def test_sampled_speculation_keeps_the_distribution_of_plain_sampling(
    llm_engine: LLMEngine,
) -> None:
    """Tokens 2 and 3 of 512 samples (top_k 2, so four outcomes) with and without drafts: the
    two empirical distributions agree within 0.1 in every cell."""
    engine = LLMEngine(
        EngineConfig(
            device="cpu",
            max_num_seqs=64,
            kv_cache_memory_bytes=128 << 20,
            speculative="prompt_lookup",
            speculative_max_seqs=64,
            prompt_lookup_min=1,
        )
    )
    prompt = rag_prompt(llm_engine, *QUESTIONS[0])
    counts: dict[str, Counter[tuple[int, ...]]] = {}
    for name, gen in (("plain", llm_engine), ("speculative", engine)):
        seeds = range(8) if name == "plain" else range(100, 108)
        outcome: Counter[tuple[int, ...]] = Counter()
        for seed in seeds:
            params = SamplingParams(n=64, temperature=1.0, top_k=2, seed=seed, max_tokens=3)
            for c in gen.generate([prompt], params)[0].outputs:
                outcome[tuple(c.token_ids[1:3])] += 1
        counts[name] = outcome
    assert engine.stats().num_draft_tokens > engine.stats().num_accepted_tokens > 0
    cells = set(counts["plain"]) | set(counts["speculative"])
    for cell in cells:
        gap = abs(counts["plain"][cell] - counts["speculative"][cell]) / 512
        assert gap < 0.1, (cell, counts)
