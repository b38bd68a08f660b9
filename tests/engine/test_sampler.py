from __future__ import annotations

import torch

from engine import SamplingParams
from engine.layers.sampler import SampleRow, banned_ngram_tokens, sample


def row(
    params: SamplingParams,
    prompt: list[int] | None = None,
    output: list[int] | None = None,
    seed: int | None = None,
) -> SampleRow:
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    return SampleRow(params, prompt or [], output or [], gen)


LOGITS = torch.tensor([[1.0, 3.0, 2.0, 0.5, -1.0]])


def test_greedy_and_tiny_top_k_or_top_p_pick_the_argmax() -> None:
    assert sample(LOGITS, [row(SamplingParams())]).token_ids == [1]
    for params in (
        SamplingParams(temperature=1.0, top_k=1),
        SamplingParams(temperature=1.0, top_p=0.01),
    ):
        assert sample(LOGITS.repeat(20, 1), [row(params)] * 20).token_ids == [1] * 20


def test_top_k_and_min_p_restrict_the_candidates() -> None:
    draws = sample(
        LOGITS.repeat(400, 1), [row(SamplingParams(temperature=1.0, top_k=2))] * 400
    ).token_ids
    assert set(draws) == {1, 2}
    draws = sample(
        LOGITS.repeat(400, 1), [row(SamplingParams(temperature=1.0, min_p=0.3))] * 400
    ).token_ids
    assert set(draws) == {1, 2}  # p(2)/p(1) = e^-1 = 0.37 >= 0.3; p(0)/p(1) = 0.14 < 0.3


def test_logprobs_are_raw_and_top_alternatives_sorted() -> None:
    result = sample(LOGITS, [row(SamplingParams(logprobs=2, repetition_penalty=5.0), prompt=[1])])
    expected = torch.log_softmax(LOGITS, -1)[0]
    assert result.token_ids == [2]  # token 1 is penalised
    assert abs(result.logprobs[0] - expected[2].item()) < 1e-6
    top = result.top_logprobs[0]
    assert top is not None and list(top) == [1, 2]


def test_penalties() -> None:
    presence = sample(LOGITS, [row(SamplingParams(presence_penalty=1.5), output=[1])])
    assert presence.token_ids == [2]
    frequency = sample(LOGITS, [row(SamplingParams(frequency_penalty=0.4), output=[1, 1, 1])])
    assert frequency.token_ids == [2]
    unpenalised_prompt = sample(LOGITS, [row(SamplingParams(presence_penalty=2.0), prompt=[1])])
    assert unpenalised_prompt.token_ids == [1]


def test_no_repeat_ngram() -> None:
    assert banned_ngram_tokens([5, 6, 7, 5, 6], 3) == [7]
    assert banned_ngram_tokens([1, 2], 3) == []
    logits = torch.tensor([[0.0, 0.0, 0.0, 9.0, 5.0, 0.0, 0.0, 0.0]])
    # After [7, 3, 7] the bigram (7, 3) exists: 3 is banned, the next best (4) is chosen.
    assert sample(
        logits, [row(SamplingParams(no_repeat_ngram_size=2), output=[7, 3, 7])]
    ).token_ids == [4]
    assert sample(logits, [row(SamplingParams(), output=[7, 3, 7])]).token_ids == [3]


def test_seeded_rows_are_reproducible_and_independent_of_the_batch() -> None:
    params = SamplingParams(temperature=1.0)
    flat = torch.zeros(1, 1000)
    alone = sample(flat, [row(params, seed=7)]).token_ids
    again = sample(flat.repeat(3, 1), [row(params), row(params, seed=7), row(params)]).token_ids
    assert again[1] == alone[0]
    other = sample(flat, [row(params, seed=8)]).token_ids
    assert other != alone


def test_top_p_keeps_the_smallest_set_reaching_p() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    draws = sample(
        logits.repeat(600, 1), [row(SamplingParams(temperature=1.0, top_p=0.7))] * 600
    ).token_ids
    assert set(draws) == {0, 1}  # 0.5 < 0.7, 0.5 + 0.3 >= 0.7
    draws = sample(
        logits.repeat(200, 1), [row(SamplingParams(temperature=1.0, top_p=0.5))] * 200
    ).token_ids
    assert set(draws) == {0}  # the first token alone reaches 0.5
