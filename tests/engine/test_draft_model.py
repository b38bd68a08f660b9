"""Draft-model speculative decoding on a tiny random model pair: the target's exact greedy tokens
(batched, alone, prefix cache on and off, under preemption, forked samples, with prompt lookup),
the sampled distribution unchanged, the draft's cache paged and prefix-cached with the target's,
and a draft of another tokenizer refused at load."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from engine import EngineConfig, LLMEngine, ModelLoadError, SamplingParams
from engine.model_loader import load_config_and_tokenizer, resolve_model
from tests.engine.tiny_models import tiny_qwen2

pytestmark = pytest.mark.model  # builds engines (on tiny random models, in seconds)

PROMPTS = [
    "hello world " * 12,
    "the cat sat on the mat and looked at the dog",
    "1 2 3 4 5 6 7 8 9 10 11 12",
    "a b c d e f g",
]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    _, _, tokenizer, _ = load_config_and_tokenizer(resolve_model(None), None)
    root = tmp_path_factory.mktemp("tiny-pair")
    tiny_qwen2(root / "target", tokenizer, 0.0)
    tiny_qwen2(root / "draft", tokenizer, 0.1)
    return str(root / "target"), str(root / "draft")


def _engine(target: str, draft: str | None = None, **overrides: object) -> LLMEngine:
    options: dict[str, object] = {
        "device": "cpu",
        "block_size": 4,
        "kv_cache_memory_bytes": 8 << 20,
        "speculative_max_seqs": 8,
    }
    if draft is not None:
        options |= {"speculative": "draft", "draft_model": draft, "num_draft_tokens": 4}
    return LLMEngine(EngineConfig(model=target, **(options | overrides)))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def plain(pair: tuple[str, str]) -> LLMEngine:
    return _engine(pair[0])


@pytest.fixture(scope="module")
def drafting(pair: tuple[str, str]) -> LLMEngine:
    return _engine(*pair)


def _greedy(engine: LLMEngine, prompts: list[str], max_tokens: int = 40) -> list[list[int]]:
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    return [o.outputs[0].token_ids for o in engine.generate(prompts, params)]


def test_greedy_tokens_are_the_targets_alone_and_batched(
    plain: LLMEngine, drafting: LLMEngine
) -> None:
    expected = _greedy(plain, PROMPTS)
    before = drafting.stats()
    assert [_greedy(drafting, [p])[0] for p in PROMPTS] == expected
    assert _greedy(drafting, PROMPTS) == expected
    stats = drafting.stats()
    drafted = stats.num_draft_tokens - before.num_draft_tokens
    accepted = stats.num_accepted_tokens - before.num_accepted_tokens
    assert 0 < accepted < drafted  # some guesses kept, some rolled back
    # Fewer target steps than tokens: accepted guesses cost no step of their own.
    assert stats.num_steps - before.num_steps < 2 * sum(len(t) for t in expected)
    assert drafting.block_manager.num_used_blocks == 0


def test_logprobs_are_the_targets(plain: LLMEngine, drafting: LLMEngine) -> None:
    params = SamplingParams(max_tokens=24, ignore_eos=True, logprobs=1)
    ref = plain.generate(PROMPTS[:1], params)[0].outputs[0]
    got = drafting.generate(PROMPTS[:1], params)[0].outputs[0]
    assert got.token_ids == ref.token_ids
    assert got.logprobs == pytest.approx(ref.logprobs, abs=1e-4)


def test_the_drafts_cache_is_prefix_cached_with_the_targets(
    pair: tuple[str, str], plain: LLMEngine
) -> None:
    engine = _engine(*pair)
    drafter = engine.drafter
    assert drafter is not None
    prompt = PROMPTS[0]
    expected = _greedy(plain, [prompt])
    assert _greedy(engine, [prompt]) == expected
    first = drafter.num_mirrored_tokens
    num_prompt = engine.count_tokens(prompt)
    assert first == num_prompt  # the draft computed the prompt beside the target
    assert _greedy(engine, [prompt]) == expected
    # The second time the prompt's full blocks came from the prefix cache, for both models.
    cached = (num_prompt - 1) // 4 * 4
    assert drafter.num_mirrored_tokens - first == num_prompt - cached
    assert engine.stats().num_prefix_hits > 0


def test_greedy_tokens_without_prefix_cache_under_preemption_and_forked(
    pair: tuple[str, str], plain: LLMEngine
) -> None:
    prompts = PROMPTS * 2
    expected = _greedy(plain, prompts, 32)
    tight = _engine(
        *pair,
        max_num_seqs=8,
        # A block: keys and values of 2 layers, 4 positions, 2 heads of 16 floats, both models.
        kv_cache_memory_bytes=2 * 2 * 4 * 2 * 16 * 4 * 2 * 44,
        enable_prefix_caching=False,
        reserve_max_tokens=False,
    )
    assert tight.block_manager.num_blocks == 44
    assert _greedy(tight, prompts, 32) == expected
    assert tight.scheduler.num_preemptions > 0
    assert tight.stats().num_accepted_tokens > 0
    forked = tight.generate(PROMPTS[:1], SamplingParams(n=3, max_tokens=32, ignore_eos=True))[0]
    assert [c.token_ids for c in forked.outputs] == [expected[0]] * 3
    assert tight.block_manager.num_used_blocks == 0


def test_with_prompt_lookup_whichever_proposes(pair: tuple[str, str], plain: LLMEngine) -> None:
    both = _engine(*pair, speculative="draft+prompt_lookup")
    expected = _greedy(plain, PROMPTS)
    assert _greedy(both, PROMPTS) == expected
    assert both.stats().num_accepted_tokens > 0


def test_drafting_switches_itself_off_when_many_sequences_decode(pair: tuple[str, str]) -> None:
    engine = _engine(*pair, speculative_max_seqs=2)
    engine.generate(PROMPTS[:3], SamplingParams(max_tokens=8, ignore_eos=True))
    stats = engine.stats()
    assert stats.num_steps_without_speculation >= 6
    assert stats.num_draft_tokens == 0


@pytest.mark.slow  # 30 s
def test_sampling_keeps_the_targets_distribution(pair: tuple[str, str], plain: LLMEngine) -> None:
    """Tokens 2 and 3 of 1,024 samples (top_k 2: four outcomes) with and without the draft
    model: the two empirical distributions agree within 0.07 in every cell. The draft's own
    distribution differs from the target's, so this checks the min(1, p/q) rule and the
    residual draw, not just a point-mass draft."""
    prompt = PROMPTS[1]
    counts: dict[str, Counter[tuple[int, ...]]] = {}
    drafting = _engine(*pair, max_num_seqs=64, speculative_max_seqs=64)
    before = drafting.stats()
    for name, engine, seeds in (("plain", plain, range(16)), ("draft", drafting, range(50, 66))):
        outcome: Counter[tuple[int, ...]] = Counter()
        for seed in seeds:
            params = SamplingParams(n=64, temperature=1.0, top_k=2, seed=seed, max_tokens=3)
            for completion in engine.generate([prompt], params)[0].outputs:
                outcome[tuple(completion.token_ids[1:3])] += 1
        counts[name] = outcome
    after = drafting.stats()
    drafted = after.num_draft_tokens - before.num_draft_tokens
    assert drafted > after.num_accepted_tokens - before.num_accepted_tokens > 0
    for cell in set(counts["plain"]) | set(counts["draft"]):
        gap = abs(counts["plain"][cell] - counts["draft"][cell]) / 1024
        assert gap < 0.07, (cell, counts)


def test_a_draft_with_another_tokenizer_is_refused(pair: tuple[str, str], tmp_path: Path) -> None:
    _, _, tokenizer, _ = load_config_and_tokenizer(resolve_model(pair[1]), None)
    tokenizer.add_tokens(["<only-in-the-draft>"])
    other = tmp_path / "other-draft"
    tiny_qwen2(other, tokenizer, 0.1)
    with pytest.raises(ModelLoadError, match="does not share the target model's tokenizer"):
        _engine(pair[0], str(other))


def test_draft_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="needs a draft_model"):
        EngineConfig(speculative="draft")
    with pytest.raises(ValueError, match="num_draft_tokens"):
        EngineConfig(speculative="draft", draft_model="x", num_draft_tokens=0)


def test_the_draft_takes_its_own_weight_format(pair: tuple[str, str], plain: LLMEngine) -> None:
    # An int8 draft beside a float32 target: only the guesses can change, never the output.
    engine = _engine(*pair, draft_quantization="int8")
    assert engine.drafter is not None
    draft_layers = {type(m).__name__ for m in engine.drafter.runner.model.modules()}
    target_layers = {type(m).__name__ for m in engine.model.modules()}
    assert "Int8Linear" in draft_layers and "Int8Linear" not in target_layers
    assert _greedy(engine, PROMPTS) == _greedy(plain, PROMPTS)
    assert engine.stats().num_draft_tokens > 0
    with pytest.raises(ValueError, match="draft_quantization"):
        EngineConfig(draft_quantization="int3")
    config = EngineConfig(quantization="int8", draft_quantization=None)
    assert (config.draft_config().quantization, config.quantization) == (None, "int8")
    assert EngineConfig(quantization="w8a8").draft_config().quantization == "w8a8"
