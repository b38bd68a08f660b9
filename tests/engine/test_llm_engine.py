"""The engine against transformers on the real SmolLM2 model and a random tiny Qwen2."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch

from engine import EngineConfig, FinishReason, LLMEngine, PromptTooLongError, SamplingParams
from tests.engine.reference import hf_generate
from tests.engine.stop_checks import LOOP_REASON, stop_on_tail_loop

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from engine import HFGenerator
    from engine.scheduler import ScheduledBatch

QUESTIONS = [
    "What is the capital of France?",
    "Name a colour of the sky.",
    "What is two plus two?",
    "Explain what a KV cache is in one sentence.",
    "Write a haiku about autumn.",
    "Who wrote Romeo and Juliet?",
    "List three prime numbers.",
    "What does CPU stand for?",
    "Translate 'good morning' into French.",
    "Why is the sea salty?",
    "Give me a synonym for 'happy'.",
    "How many legs does a spider have?",
    "What is the boiling point of water in Celsius?",
    "Describe a cat in five words.",
    "What is photosynthesis?",
    "Name the largest planet in the solar system.",
    "What is the square root of 81?",
    "Suggest a name for a pet goldfish.",
    "What language is spoken in Brazil?",
    "Summarise the plot of Cinderella in one sentence.",
    "What is machine learning?",
]


@pytest.fixture
def engine(llm_engine: LLMEngine) -> LLMEngine:
    return llm_engine


def chat(engine: LLMEngine, question: str) -> str:
    return engine.apply_chat_template([{"role": "user", "content": question}])


def hf_greedy(
    model: PreTrainedModel, prompt_ids: list[int], max_tokens: int, eos: list[int]
) -> list[int]:
    ids = torch.tensor([prompt_ids])
    out = hf_generate(model, ids, max_new_tokens=max_tokens, do_sample=False)
    tokens: list[int] = out[0, ids.shape[1] :].tolist()
    return tokens[: next((i for i, t in enumerate(tokens) if t in eos), len(tokens))]


@pytest.mark.slow  # 48 s: the default tier keeps shorter equivalence checks
def test_greedy_is_token_identical_to_transformers_on_21_prompts(
    engine: LLMEngine, generator: HFGenerator, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompts = [chat(engine, q) for q in QUESTIONS]
    params = SamplingParams(max_tokens=20)
    outputs = engine.generate(prompts, params)
    expected = [
        hf_greedy(generator.model, out.prompt_token_ids, 20, generator.eos_token_ids)
        for out in outputs
    ]
    for out, tokens in zip(outputs, expected, strict=True):
        assert out.outputs[0].token_ids == tokens, out.prompt

    # All 21 decoding together, split into several groups by context length.
    import engine.model_runner as model_runner

    monkeypatch.setattr(model_runner, "DECODE_GROUP_MIN_SIZE", 4)
    monkeypatch.setattr(engine.scheduler, "max_num_seqs", 32)
    batch = engine.scheduler.schedule
    groups_seen: list[int] = []

    def counting_schedule() -> ScheduledBatch:
        scheduled = batch()
        groups_seen.append(
            len(
                model_runner._by_context_length(
                    [i for i, (_, n) in enumerate(scheduled.items) if n == 1],
                    [seq.num_computed_tokens + 1 for seq, _ in scheduled.items],
                )
            )
        )
        return scheduled

    monkeypatch.setattr(engine.scheduler, "schedule", counting_schedule)
    together = engine.generate(prompts, params)
    assert max(groups_seen) == 4
    for out, tokens in zip(together, expected, strict=True):
        assert out.outputs[0].token_ids == tokens, out.prompt


def test_chosen_token_logprobs_match_the_reference_model(
    engine: LLMEngine, generator: HFGenerator
) -> None:
    out = engine.generate([chat(engine, QUESTIONS[3])], SamplingParams(max_tokens=16, logprobs=2))[
        0
    ]
    completion = out.outputs[0]
    ids = torch.tensor([out.prompt_token_ids + completion.token_ids])
    with torch.inference_mode():
        reference = generator.model(ids).logits[0].float().log_softmax(-1)
    start = len(out.prompt_token_ids) - 1
    for step, token in enumerate(completion.token_ids):
        assert completion.logprobs[step] == pytest.approx(
            reference[start + step, token].item(), abs=1e-3
        )
    assert completion.top_logprobs is not None and len(completion.top_logprobs) == len(
        completion.token_ids
    )


def test_random_tiny_qwen2_with_qkv_bias_and_gqa_matches_transformers(
    tmp_path: Path, generator: HFGenerator
) -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(generator.tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        bos_token_id=generator.tokenizer.bos_token_id,
        eos_token_id=generator.tokenizer.eos_token_id,
    )
    reference = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():  # random biases, so that the qkv bias path matters
        for layer in reference.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)
    reference.save_pretrained(tmp_path / "tiny-qwen2")
    generator.tokenizer.save_pretrained(tmp_path / "tiny-qwen2")
    tiny = LLMEngine(
        EngineConfig(
            model=str(tmp_path / "tiny-qwen2"),
            device="cpu",
            block_size=4,
            kv_cache_memory_bytes=4 << 20,
        )
    )
    prompts = ["hello world", "the cat sat on the mat and looked", "1 2 3 4 5 6 7 8 9 10 11 12"]
    for out in tiny.generate(prompts, SamplingParams(max_tokens=12)):
        assert out.outputs[0].token_ids == hf_greedy(
            reference, out.prompt_token_ids, 12, tiny.eos_token_ids
        )


def test_seeded_sampling_is_reproducible(engine: LLMEngine) -> None:
    prompt = chat(engine, "Write one sentence about the sea.")
    params = SamplingParams(n=3, temperature=1.0, top_p=0.95, seed=11, max_tokens=12)
    first = engine.generate([prompt], params)[0]
    second = engine.generate([prompt], params)[0]
    assert [o.token_ids for o in first.outputs] == [o.token_ids for o in second.outputs]
    other = engine.generate([prompt], params.with_overrides(seed=12))[0]
    assert [o.token_ids for o in other.outputs] != [o.token_ids for o in first.outputs]


def test_n_samples_share_the_prompt_blocks_and_differ(engine: LLMEngine) -> None:
    bm = engine.block_manager
    prompt = chat(engine, "Describe the ocean in a few words, with as much imagination as you can.")
    request_id = engine.add_request(
        prompt, SamplingParams(n=4, temperature=1.0, seed=3, max_tokens=10)
    )
    engine.step()  # prefill once, then fork into 4 samples
    request = engine._requests[request_id]
    assert len(request.seqs) == 4
    num_full = len(request.prompt_token_ids) // bm.block_size
    shared = request.seqs[0].block_table[:num_full]
    assert all(s.block_table[:num_full] == shared for s in request.seqs)
    assert all(bm.blocks[b].ref_count == 4 for b in shared)
    outputs = []
    while engine.has_unfinished_requests():
        outputs += [o for o in engine.step() if o.finished]
    completions = outputs[-1].outputs
    assert len(completions) == 4 and len({tuple(c.token_ids) for c in completions}) > 1
    assert bm.num_used_blocks == 0


@pytest.mark.parametrize("reserve", [False, True], ids=["preempt", "reserve"])
def test_a_tiny_kv_budget_gives_the_same_greedy_tokens(engine: LLMEngine, reserve: bool) -> None:
    prompts = [chat(engine, q) for q in QUESTIONS[:6]]
    params = SamplingParams(max_tokens=24)
    expected = [o.outputs[0].token_ids for o in engine.generate(prompts, params)]
    per_block = 2 * 30 * 16 * 3 * 64 * 4
    tight = LLMEngine(
        EngineConfig(
            device="cpu",
            max_num_seqs=6,
            kv_cache_memory_bytes=per_block * 9,
            enable_prefix_caching=False,
            reserve_max_tokens=reserve,
        )
    )
    got = [o.outputs[0].token_ids for o in tight.generate(prompts, params)]
    # Without the reservation the pool overflows and sequences are recomputed; with it,
    # requests wait their turn instead.
    assert (tight.scheduler.num_preemptions > 0) is not reserve
    assert got == expected
    assert tight.block_manager.num_used_blocks == 0


def test_chunked_prefill_and_prefix_cache_hits_give_the_same_output(engine: LLMEngine) -> None:
    passage = " ".join(
        f"Fact {i}: the KV cache keeps the keys and values of token {i}." for i in range(25)
    )
    prompt = chat(engine, passage + " What does the KV cache keep?")
    params = SamplingParams(max_tokens=16)
    miss = engine.generate([prompt], params)[0]
    hits_before = engine.block_manager.num_prefix_hits
    hit = engine.generate([prompt], params)[0]
    assert engine.block_manager.num_prefix_hits > hits_before
    assert hit.outputs[0].token_ids == miss.outputs[0].token_ids
    # Every full block but the one holding the last prompt token came from the cache.
    block = engine.config.block_size
    assert hit.num_cached_tokens == (len(hit.prompt_token_ids) - 1) // block * block
    assert miss.num_cached_tokens < hit.num_cached_tokens
    chunked = LLMEngine(
        EngineConfig(device="cpu", max_num_batched_tokens=48, kv_cache_memory_bytes=64 << 20)
    )
    assert len(miss.prompt_token_ids) > 3 * 48
    assert chunked.generate([prompt], params)[0].outputs[0].token_ids == miss.outputs[0].token_ids


def test_stop_strings_and_lengths(engine: LLMEngine) -> None:
    prompt = chat(engine, QUESTIONS[0])
    reference = engine.generate([prompt], SamplingParams(max_tokens=20))[0].outputs[0]
    stop = " " + reference.text.split()[3]
    out = engine.generate([prompt], SamplingParams(max_tokens=20, stop=[stop]))[0].outputs[0]
    assert out.finish_reason is FinishReason.STOP and out.stop_reason == stop
    assert out.text == reference.text[: reference.text.index(stop)]
    short = engine.generate([prompt], SamplingParams(max_tokens=3))[0].outputs[0]
    assert short.finish_reason is FinishReason.LENGTH and len(short.token_ids) == 3


def test_stats_count_the_steps_that_ran_a_batch_and_their_time(engine: LLMEngine) -> None:
    before = engine.stats()
    assert engine.step() == []  # nothing to do: not a step the mean step time should count
    assert engine.stats().num_steps == before.num_steps
    params = SamplingParams(max_tokens=5, ignore_eos=True)
    out = engine.generate([chat(engine, QUESTIONS[1])], params)[0].outputs[0]
    after = engine.stats()
    assert len(out.token_ids) == 5
    # One token per step (no speculation): the prefill's step and four decode steps at least.
    assert after.num_steps - before.num_steps >= 5
    assert after.step_time_s > before.step_time_s
    # On the CPU the device figures are absent, not zero.
    assert after.cuda_memory_allocated_bytes is None and after.cuda_memory_reserved_bytes is None
    assert after.gpu_utilization is None


def test_abort_frees_every_block_and_unknown_ids_are_ignored(engine: LLMEngine) -> None:
    bm = engine.block_manager
    ids = [
        engine.add_request(chat(engine, q), SamplingParams(n=2, temperature=0.8, max_tokens=50))
        for q in QUESTIONS[:3]
    ]
    for _ in range(4):
        engine.step()
    assert bm.num_used_blocks > 0
    for request_id in ids:
        engine.abort(request_id)
    engine.abort("no-such-request")
    assert bm.num_used_blocks == 0 and not engine.has_unfinished_requests()


def test_bad_requests_are_clear_errors(engine: LLMEngine) -> None:
    too_long = list(range(100, 100 + engine.max_model_len))
    with pytest.raises(PromptTooLongError, match="truncate_prompt_tokens"):
        engine.add_request(too_long, SamplingParams(max_tokens=4))
    out = engine.generate([too_long], SamplingParams(max_tokens=2, truncate_prompt_tokens=32))[0]
    assert out.prompt_token_ids == too_long[-32:]
    with pytest.raises(ValueError, match="KV blocks"):
        LLMEngine(EngineConfig(device="cpu", kv_cache_memory_bytes=1)).add_request(
            "hi", SamplingParams(max_tokens=64)
        )


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.model
def test_half_precision_runs_on_cpu(dtype: str) -> None:
    half = LLMEngine(EngineConfig(device="cpu", dtype=dtype, kv_cache_memory_bytes=32 << 20))
    assert half.runner.kv_caches[0][0].dtype == getattr(torch, dtype)
    out = half.generate([chat(half, QUESTIONS[0])], SamplingParams(max_tokens=10))[0].outputs[0]
    assert "Paris" in out.text


LOOPING_QUESTION = "Write the letter A fifty times."  # SmolLM2 greedy: "A FEW FEW FEW ..."


def test_the_tests_stop_check_stops_on_a_repeated_pattern_only() -> None:
    assert stop_on_tail_loop([5, 1, 2, 1, 2, 1, 2, 1, 2]) == LOOP_REASON
    assert stop_on_tail_loop([7, 7, 7]) is None  # three repeats are not yet a loop
    assert stop_on_tail_loop(list(range(40))) is None


def test_stop_check_ends_a_completion_early_with_its_reason(engine: LLMEngine) -> None:
    prompt = chat(engine, LOOPING_QUESTION)
    unchecked = engine.generate([prompt], SamplingParams(max_tokens=40))[0].outputs[0]
    assert unchecked.finish_reason is FinishReason.LENGTH  # penalties off: it loops to the end

    looped = SamplingParams(max_tokens=40, stop_check=stop_on_tail_loop)
    out = engine.generate([prompt], looped)[0].outputs[0]
    assert out.finish_reason is FinishReason.STOP and out.stop_reason == LOOP_REASON
    assert 4 <= len(out.token_ids) < 40
    assert out.token_ids == unchecked.token_ids[: len(out.token_ids)]
    assert out.text == engine.prompts.decode(out.token_ids)  # the reason is not cut from the text

    fifth = SamplingParams(max_tokens=20, stop_check=lambda ids: "five" if len(ids) >= 5 else None)
    out = engine.generate([chat(engine, QUESTIONS[3])], fifth)[0].outputs[0]
    assert (len(out.token_ids), out.stop_reason) == (5, "five")
    with pytest.raises(ValueError, match="stop_check"):  # not a callable: refused
        SamplingParams(stop_check="loop")  # type: ignore[arg-type]
