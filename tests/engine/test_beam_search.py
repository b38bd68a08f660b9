"""Beam search: the rule on hand-made logits, and the engine against transformers' beam search."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import torch

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.beam_search import BeamSearch
from tests.engine.reference import hf_generate
from tests.engine.test_llm_engine import QUESTIONS, chat

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from engine import HFGenerator


def test_finished_beams_are_scored_by_length_and_the_search_stops_when_none_can_win() -> None:
    # Vocabulary of 5, token 0 ends a sequence; two beams.
    search = BeamSearch(width=2, length_penalty=1.0, eos_token_ids=[0], prompt_len=3, max_length=9)
    first = torch.log(torch.tensor([[0.05, 0.5, 0.3, 0.1, 0.05]]))
    beams = search.step(first, [[]], [[]])
    assert [(c.parent, c.token) for c in beams] == [(0, 1), (0, 2)]
    assert search.finished == [] and not search.done
    # Both beams now prefer to end: the top two candidates finish, the next two run on.
    second = torch.log(torch.tensor([[0.9, 0.04, 0.03, 0.02, 0.01], [0.9, 0.04, 0.03, 0.02, 0.01]]))
    beams = search.step(second, [[1], [2]], [[-0.69], [-1.2]])
    assert [h.token_ids for h in search.finished] == [[1, 0], [2, 0]]
    assert all(h.ended_on_eos for h in search.finished)
    expected = (float(first[0, 1]) + float(second[0, 0])) / 2  # summed log-prob / 2 tokens
    assert search.finished[0].score == pytest.approx(expected)
    # The running beams score far below the finished ones: nothing can improve, so it stops.
    assert search.done and beams == []
    assert [h.token_ids for h in search.best(1)] == [[1, 0]]


def test_beam_search_parameters_are_checked() -> None:
    with pytest.raises(ValueError, match="must not exceed beam_width"):
        SamplingParams(use_beam_search=True, beam_width=2, n=3)
    with pytest.raises(ValueError, match="beam search does not support temperature, stop"):
        SamplingParams(use_beam_search=True, temperature=0.5, stop=["x"])
    with pytest.raises(ValueError, match="beam_width"):
        SamplingParams(use_beam_search=True, beam_width=0)


def hf_beams(
    model: PreTrainedModel,
    prompt_ids: list[int],
    width: int,
    n: int,
    max_tokens: int,
    eos: list[int],
    **kw: Any,
) -> list[list[int]]:
    ids = torch.tensor([prompt_ids])
    out = hf_generate(
        model,
        ids,
        max_new_tokens=max_tokens,
        do_sample=False,
        num_beams=width,
        num_return_sequences=n,
        **kw,
    )
    beams = []
    for row in out:
        tokens = row[ids.shape[1] :].tolist()
        beams.append(tokens[: next((i for i, t in enumerate(tokens) if t in eos), len(tokens))])
    return beams


def test_beams_are_those_of_transformers(llm_engine: LLMEngine, generator: HFGenerator) -> None:
    cases = [
        (QUESTIONS[0], SamplingParams(use_beam_search=True, beam_width=4, n=4, max_tokens=16), {}),
        (QUESTIONS[2], SamplingParams(use_beam_search=True, beam_width=4, n=4, max_tokens=16), {}),
        (
            QUESTIONS[5],
            SamplingParams(
                use_beam_search=True, beam_width=3, n=2, max_tokens=12, length_penalty=0.5
            ),
            {"length_penalty": 0.5},
        ),
    ]
    for question, params, extra in cases:
        out = llm_engine.generate([chat(llm_engine, question)], params)[0]
        expected = hf_beams(
            generator.model,
            out.prompt_token_ids,
            params.beam_width,
            params.n,
            params.max_tokens,
            generator.eos_token_ids,
            **extra,
        )
        assert [c.token_ids for c in out.outputs] == expected, question
        assert all(c.text == llm_engine.prompts.decode(c.token_ids) for c in out.outputs)
        assert len(out.outputs[0].logprobs) == len(out.outputs[0].token_ids)
    assert llm_engine.block_manager.num_used_blocks == 0


@pytest.mark.slow  # 7 s
def test_beam_search_runs_beside_other_requests_and_needs_the_reservation(
    llm_engine: LLMEngine,
) -> None:
    prompts = [chat(llm_engine, q) for q in QUESTIONS[:3]]
    greedy = SamplingParams(max_tokens=12)
    beam = SamplingParams(use_beam_search=True, beam_width=3, max_tokens=12)
    alone = [llm_engine.generate([p], beam)[0].outputs[0].token_ids for p in prompts[:2]]
    plain = llm_engine.generate([prompts[2]], greedy)[0].outputs[0].token_ids
    mixed = llm_engine.generate(prompts, [beam, beam, greedy])
    assert [o.outputs[0].token_ids for o in mixed] == [*alone, plain]
    no_reservation = LLMEngine(
        EngineConfig(device="cpu", kv_cache_memory_bytes=16 << 20, reserve_max_tokens=False)
    )
    with pytest.raises(ValueError, match="needs reserve_max_tokens"):
        no_reservation.add_request(prompts[0], beam)


def test_the_transformers_baseline_refuses_beam_search(generator: HFGenerator) -> None:
    with pytest.raises(ValueError, match="beam search is a feature of our engine"):
        generator.generate(["hello"], SamplingParams(use_beam_search=True, max_tokens=2))
