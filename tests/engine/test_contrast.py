"""Two-distribution decoding: the rule on crafted logits; contrastive decoding (a strong and a weak
model) and context-aware decoding (a prompt with and without its passages) in the engine, each
against a token-by-token reference computed with transformers on tiny random models."""

from __future__ import annotations

import pytest
import torch

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.layers.contrast import contrast
from engine.model_loader import load_config_and_tokenizer, resolve_model
from tests.engine.tiny_models import tiny_qwen2

PROMPTS = ["the cat sat on the mat and looked at the dog", "1 2 3 4 5 6 7 8 9 10 11 12"]


# ------------------------------------------------------------------------------- the rule
def test_the_token_the_strong_model_is_surer_of_than_the_weak_one_wins() -> None:
    strong = torch.tensor([[3.0, 2.9, -5.0]])
    weak = torch.tensor([[3.0, 0.0, -5.0]])
    assert int(strong.argmax()) == 0
    assert int(contrast(strong, weak, weight=0.5, cutoff=0.1).argmax()) == 1
    # Weight 0 is the strong distribution itself.
    assert int(contrast(strong, weak, weight=0.0, cutoff=0.1).argmax()) == 0


def test_the_cutoff_keeps_implausible_tokens_out() -> None:
    # Token 2 is unlikely for the strong model, far less so than for the weak one: their
    # difference favours it, but it has under a tenth of the top token's probability.
    strong = torch.tensor([[5.0, 4.0, 0.0]])
    weak = torch.tensor([[5.0, 5.0, -30.0]])
    assert int(contrast(strong, weak, weight=0.5, cutoff=0.0).argmax()) == 2
    scores = contrast(strong, weak, weight=0.5, cutoff=0.1)
    assert scores[0, 2] == -float("inf")
    assert int(scores.argmax()) == 0
    with pytest.raises(ValueError, match="differ"):
        contrast(strong, weak[:, :2], weight=0.5, cutoff=0.1)


def test_two_distribution_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="needs an amateur_model"):
        EngineConfig(decoding="contrastive")
    with pytest.raises(ValueError, match="exclude each other"):
        EngineConfig(decoding="context_aware", speculative="prompt_lookup")
    with pytest.raises(ValueError, match="decoding must be one of"):
        EngineConfig(decoding="dola")
    with pytest.raises(ValueError, match="contrast_cutoff"):
        EngineConfig(decoding="context_aware", contrast_cutoff=1.0)
    with pytest.raises(ValueError, match="beam search"):
        SamplingParams(use_beam_search=True, context_free_prompt="q")


# ------------------------------------------------------------------------------ the engine
@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    _, _, tokenizer, _ = load_config_and_tokenizer(resolve_model(None), None)
    root = tmp_path_factory.mktemp("tiny-contrast")
    tiny_qwen2(root / "strong", tokenizer, 0.0)
    tiny_qwen2(root / "weak", tokenizer, 0.3)
    return str(root / "strong"), str(root / "weak")


def _engine(model: str, **options: object) -> LLMEngine:
    base: dict[str, object] = {"device": "cpu", "block_size": 4, "kv_cache_memory_bytes": 8 << 20}
    return LLMEngine(EngineConfig(model=model, **(base | options)))  # type: ignore[arg-type]


def _reference(
    strong: str, weak: str | None, ids: list[int], weak_ids: list[int], steps: int
) -> list[int]:
    """Greedy two-distribution decoding with transformers: full forward passes each step."""
    from transformers import AutoModelForCausalLM

    models = [AutoModelForCausalLM.from_pretrained(strong).eval()]
    models.append(AutoModelForCausalLM.from_pretrained(weak).eval() if weak else models[0])
    out: list[int] = []
    with torch.inference_mode():
        for _ in range(steps):
            s = models[0](torch.tensor([ids + out])).logits[:, -1]
            w = models[1](torch.tensor([weak_ids + out])).logits[:, -1]
            out.append(int(contrast(s, w, weight=0.5, cutoff=0.1).argmax()))
    return out


@pytest.mark.model
def test_contrastive_decoding_follows_the_reference(pair: tuple[str, str]) -> None:
    strong, weak = pair
    engine = _engine(strong, decoding="contrastive", amateur_model=weak)
    params = SamplingParams(max_tokens=12, ignore_eos=True, logprobs=1)
    plain = _engine(strong)
    outs = engine.generate(PROMPTS, params)
    plain_outs = plain.generate(PROMPTS, params)
    for out, plain_out in zip(outs, plain_outs, strict=True):
        ids = out.prompt_token_ids
        assert out.outputs[0].token_ids == _reference(strong, weak, ids, ids, 12)
        # The logprobs reported are the strong model's own: recomputed by the plain engine
        # for the contrastive tokens, they agree.
        first = plain_out.outputs[0]
        if first.token_ids[0] == out.outputs[0].token_ids[0]:
            assert out.outputs[0].logprobs[0] == pytest.approx(first.logprobs[0], abs=1e-4)
    assert [o.outputs[0].token_ids for o in outs] != [o.outputs[0].token_ids for o in plain_outs]
    # The model against itself is plain decoding.
    itself = _engine(strong, decoding="contrastive", amateur_model=strong)
    assert [o.outputs[0].token_ids for o in itself.generate(PROMPTS, params)] == [
        o.outputs[0].token_ids for o in plain_outs
    ]


@pytest.mark.model
def test_context_aware_decoding_follows_the_reference(pair: tuple[str, str]) -> None:
    strong = pair[0]
    engine = _engine(strong, decoding="context_aware")
    context = "passage: the dog barked at the cat twice. "
    question = "question: what did the dog do?"
    params = SamplingParams(max_tokens=12, ignore_eos=True, context_free_prompt=question)
    out = engine.generate([context + question], params)[0]
    free_ids = engine.prompts.prompt_ids(question, params)
    expected = _reference(strong, None, out.prompt_token_ids, free_ids, 12)
    assert out.outputs[0].token_ids == expected
    plain = _engine(strong)
    plain_params = SamplingParams(max_tokens=12, ignore_eos=True)
    assert (
        out.outputs[0].token_ids
        != plain.generate([context + question], plain_params)[0].outputs[0].token_ids
    )
    # Without passages to contrast, the rule is plain decoding.
    same = SamplingParams(max_tokens=12, ignore_eos=True, context_free_prompt=PROMPTS[0])
    got = engine.generate([PROMPTS[0]], same)[0].outputs[0].token_ids
    assert got == plain.generate([PROMPTS[0]], plain_params)[0].outputs[0].token_ids
    assert engine.block_manager.num_used_blocks == 0


@pytest.mark.model
def test_context_aware_decoding_batched_preempted_and_forked(pair: tuple[str, str]) -> None:
    strong = pair[0]
    requests = [
        (f"passage {i}: " + " ".join(str(j * i) for j in range(12)) + " end. ", f"q{i}?")
        for i in range(1, 7)
    ]

    def params(question: str, n: int = 1) -> SamplingParams:
        return SamplingParams(n=n, max_tokens=20, ignore_eos=True, context_free_prompt=question)

    roomy = _engine(strong, decoding="context_aware")
    alone = [roomy.generate([c + q], params(q))[0].outputs[0].token_ids for c, q in requests]
    # One block: keys and values of 2 layers, 4 positions, 2 heads of 16 floats.
    tight = _engine(
        strong,
        decoding="context_aware",
        kv_cache_memory_bytes=2 * 2 * 4 * 2 * 16 * 4 * 40,
        reserve_max_tokens=False,
        enable_prefix_caching=False,
    )
    outs = tight.generate([c + q for c, q in requests], [params(q) for _, q in requests])
    assert [o.outputs[0].token_ids for o in outs] == alone
    assert tight.scheduler.num_preemptions > 0
    forked = roomy.generate([requests[0][0] + requests[0][1]], params(requests[0][1], n=3))[0]
    assert [c.token_ids for c in forked.outputs] == [alone[0]] * 3
    assert roomy.block_manager.num_used_blocks == tight.block_manager.num_used_blocks == 0


@pytest.mark.model
def test_a_context_free_prompt_needs_a_context_aware_engine(pair: tuple[str, str]) -> None:
    engine = _engine(pair[0])
    with pytest.raises(ValueError, match="decoding='context_aware'"):
        engine.generate(["p"], SamplingParams(max_tokens=2, context_free_prompt="q"))
