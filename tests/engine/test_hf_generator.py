"""The transformers baseline generator, on the real SmolLM2 model."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import torch

from engine import FinishReason, PromptTooLongError, SamplingParams
from engine.hf_generator import _PresenceFrequencyPenalty
from tests.engine.reference import hf_generate
from tests.engine.stop_checks import LOOP_REASON, stop_on_tail_loop

if TYPE_CHECKING:
    from engine.hf_generator import HFGenerator

QUESTIONS = [
    "What is the capital of France?",
    "Name a colour of the sky.",
    "What is two plus two?",
]


def _prompt(generator: HFGenerator, question: str) -> str:
    return generator.apply_chat_template([{"role": "user", "content": question}])


def test_greedy_matches_transformers_generate_token_for_token(generator: HFGenerator) -> None:
    prompt = _prompt(generator, QUESTIONS[0])
    ours = generator.generate([prompt], SamplingParams(max_tokens=16))[0]
    ids = torch.tensor([ours.prompt_token_ids])
    reference = hf_generate(generator.model, ids, max_new_tokens=16, do_sample=False)[
        0, ids.shape[1] :
    ].tolist()
    eos = generator.eos_token_ids
    expected = reference[: next((i for i, t in enumerate(reference) if t in eos), len(reference))]
    assert ours.outputs[0].token_ids == expected
    assert "Paris" in ours.outputs[0].text


def test_logprobs_are_the_models_own_chosen_token_logprobs(generator: HFGenerator) -> None:
    prompt = _prompt(generator, QUESTIONS[1])
    out = generator.generate([prompt], SamplingParams(max_tokens=12, logprobs=3))[0]
    completion = out.outputs[0]
    ids = torch.tensor([out.prompt_token_ids + completion.token_ids])
    with torch.inference_mode():
        logprobs = generator.model(ids).logits[0].float().log_softmax(-1)
    start = len(out.prompt_token_ids) - 1
    for step, token in enumerate(completion.token_ids):
        assert completion.logprobs[step] == pytest.approx(
            logprobs[start + step, token].item(), abs=1e-3
        )
    assert completion.top_logprobs is not None and len(completion.top_logprobs) == len(
        completion.token_ids
    )
    # Greedy: the chosen token is the most likely alternative.
    for token, alternatives in zip(completion.token_ids, completion.top_logprobs, strict=True):
        assert max(alternatives, key=alternatives.__getitem__) == token


def test_batched_prompts_come_back_in_order_and_match_single_runs(generator: HFGenerator) -> None:
    prompts = [_prompt(generator, q) for q in QUESTIONS]
    params = SamplingParams(max_tokens=10)
    batched = generator.generate(prompts, params)
    for prompt, out in zip(prompts, batched, strict=True):
        single = generator.generate([prompt], params)[0]
        assert out.prompt_token_ids == single.prompt_token_ids
        assert out.outputs[0].token_ids == single.outputs[0].token_ids


def test_n_samples_seeded_are_reproducible_and_distinct(generator: HFGenerator) -> None:
    prompt = _prompt(generator, "Write one sentence about the sea.")
    params = SamplingParams(n=4, temperature=1.0, top_p=0.95, seed=123, max_tokens=12)
    first = generator.generate([prompt], params)[0]
    second = generator.generate([prompt], params)[0]
    assert len(first.outputs) == 4
    assert [o.text for o in first.outputs] == [o.text for o in second.outputs]
    assert len({o.text for o in first.outputs}) > 1
    assert all(len(o.logprobs) == len(o.token_ids) for o in first.outputs)


def test_stop_string_ends_and_is_removed(generator: HFGenerator) -> None:
    prompt = _prompt(generator, QUESTIONS[0])
    reference = generator.generate([prompt], SamplingParams(max_tokens=20))[0].outputs[0].text
    stop = " " + reference.split()[3]  # a word in the middle of the greedy answer
    completion = generator.generate([prompt], SamplingParams(max_tokens=20, stop=[stop]))[
        0
    ].outputs[0]
    assert completion.finish_reason is FinishReason.STOP
    assert completion.stop_reason == stop
    assert completion.text == reference[: reference.index(stop)]


def test_max_tokens_gives_length_finish_and_timings(generator: HFGenerator) -> None:
    prompt = _prompt(generator, "Tell me a long story about a dragon.")
    out = generator.generate([prompt], SamplingParams(max_tokens=6))[0]
    assert out.outputs[0].finish_reason is FinishReason.LENGTH
    assert len(out.outputs[0].token_ids) == 6
    timing = out.timing
    ttft, e2e = timing.time_to_first_token_s, timing.e2e_latency_s
    assert ttft is not None and e2e is not None and 0 < ttft <= e2e
    assert len(timing.inter_token_latencies_s) == 5


def test_prompt_longer_than_the_context_is_an_error_or_truncated(generator: HFGenerator) -> None:
    too_long = list(range(100, 100 + generator.max_model_len))
    with pytest.raises(PromptTooLongError, match="truncate_prompt_tokens"):
        generator.generate([too_long], SamplingParams(max_tokens=4))
    out = generator.generate([too_long], SamplingParams(max_tokens=2, truncate_prompt_tokens=64))[0]
    assert out.prompt_token_ids == too_long[-64:]


def test_mismatched_params_list_is_rejected(generator: HFGenerator) -> None:
    with pytest.raises(ValueError, match="sampling params"):
        generator.generate(["a", "b"], [SamplingParams()])


def test_presence_and_frequency_penalties_only_touch_generated_tokens() -> None:
    penalty = _PresenceFrequencyPenalty(prompt_len=2, presence=0.5, frequency=0.25)
    input_ids = torch.tensor([[3, 3, 1, 1, 2]])  # prompt [3, 3], generated [1, 1, 2]
    scores = penalty(input_ids, torch.zeros(1, 5))
    assert scores[0].tolist() == [0.0, -1.0, -0.75, 0.0, 0.0]


def test_stop_check_ends_rows_early_like_the_engine(generator: HFGenerator) -> None:
    prompts = [
        _prompt(generator, "Write the letter A fifty times."),  # loops under greedy decoding
        _prompt(generator, QUESTIONS[0]),
    ]
    params = SamplingParams(max_tokens=40, stop_check=stop_on_tail_loop)
    looping, plain = generator.generate(prompts, params)
    reference = generator.generate(prompts[:1], SamplingParams(max_tokens=40))[0].outputs[0]
    out = looping.outputs[0]
    assert out.finish_reason is FinishReason.STOP and out.stop_reason == LOOP_REASON
    assert 4 <= len(out.token_ids) < 40
    assert out.token_ids == reference.token_ids[: len(out.token_ids)]
    assert plain.outputs[0].stop_reason != LOOP_REASON
