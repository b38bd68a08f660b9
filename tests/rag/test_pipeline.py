"""Pipeline.ask end to end: real FAISS, real SQLite, real SmolLM2."""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

import pytest

from engine import AsyncEngine
from guards.registry import registered_guards
from rag.citations import attribute, cited_numbers, is_declined
from rag.errors import IndexNotFoundError, InvalidInputError
from rag.prompt import build_messages
from rag.types import Passage, Result

if TYPE_CHECKING:
    from engine import HFGenerator, LLMEngine
    from rag.pipeline import Pipeline
    from rag.settings import Settings


def test_demo_question_is_answered_with_a_citation_of_the_fact(demo_pipeline: Pipeline) -> None:
    result = demo_pipeline.ask("What does a KV cache avoid recomputing?")
    assert not result.abstained
    assert result.citations, result.answer
    cited = result.citations[0]
    assert cited.doc_id == "kv-cache.md"
    assert "recomput" in cited.text.lower()
    assert any(word in result.answer.lower() for word in ("key", "value"))
    assert result.passages[cited.number - 1].chunk_id == cited.chunk_id
    assert {"retrieve_s", "generate_s", "total_s"} <= result.timings.keys()
    assert result.usage.prompt_tokens > 50 and result.usage.completion_tokens > 0
    assert Result.from_dict(result.to_dict()) == result


def test_irrelevant_question_abstains_without_calling_the_model(
    demo_pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_generation(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError("the model must not be called")

    monkeypatch.setattr(demo_pipeline.engine, "generate", no_generation)
    result = demo_pipeline.ask("Who won the 1998 football world cup final?")
    assert result.abstained and result.abstain_reason and "min_score" in result.abstain_reason
    assert result.citations == [] and result.passages == []
    assert result.usage.completion_tokens == 0


def test_bad_questions_and_unknown_index(demo_pipeline: Pipeline) -> None:
    with pytest.raises(InvalidInputError, match="empty"):
        demo_pipeline.ask("   ")
    with pytest.raises(InvalidInputError, match="at most 2000"):
        demo_pipeline.ask("why? " * 500)
    with pytest.raises(IndexNotFoundError, match="available: demo"):
        demo_pipeline.ask("What is a KV cache?", index="nope")
    with pytest.raises(InvalidInputError, match="unknown option"):
        demo_pipeline.ask("What is a KV cache?", topk=3)


def test_same_passages_reuse_the_prompts_kv(demo_pipeline: Pipeline, llm_engine: LLMEngine) -> None:
    # Both retrieve the same four demo passages, ranked differently: the second prompt reuses
    # the first one's order, so it is cached up to its question.
    first = demo_pipeline.ask("What does a KV cache avoid recomputing?", max_tokens=4)
    second = demo_pipeline.ask("What does the KV cache store?", max_tokens=4)
    assert [p.chunk_id for p in second.passages] == [p.chunk_id for p in first.passages]
    assert [p.score for p in second.passages] != sorted(p.score for p in second.passages)[::-1]
    engine = demo_pipeline.engine
    prompt = engine.apply_chat_template(build_messages("?", second.passages))
    shared = engine.count_tokens(prompt.split("Question:")[0])
    block = llm_engine.config.block_size
    assert second.usage.cached_prompt_tokens >= (shared // block - 1) * block
    assert second.usage.cached_prompt_tokens < second.usage.prompt_tokens


def test_prompt_numbers_passages_and_states_the_rule() -> None:
    passages = [
        Passage("d1", "d1#0", "Alpha text.", 0.9),
        Passage("d2", "d2#0", "Beta\n text.", 0.8),
    ]
    system, user = build_messages("Why?", passages)
    assert "only" in system["content"] and "I don't know" in system["content"]
    assert "[1] Alpha text." in user["content"] and "[2] Beta text." in user["content"]
    assert user["content"].rstrip().endswith("Answer:")


def test_citation_attribution() -> None:
    passages = [
        Passage("kv", "kv#0", "The KV cache stores keys and values of earlier tokens.", 0.8),
        Passage("bs", "bs#0", "Batching runs several requests together on the GPU.", 0.6),
    ]
    explicit = attribute("Batching groups requests [2]. Also [7].", passages)
    assert [(c.number, c.method) for c in explicit] == [(2, "explicit")]
    overlap = attribute("It stores the keys and values of earlier tokens.", passages)
    assert [(c.number, c.doc_id, c.method) for c in overlap] == [(1, "kv", "overlap")]
    assert attribute("Bananas are yellow fruit.", passages) == []
    assert attribute("I don't know.", passages) == []
    assert cited_numbers("see [3] and [1] and [3]") == [3, 1]
    assert is_declined("Sorry, I do not know.") and not is_declined("The cache stores keys.")


def test_passages_are_dropped_until_the_prompt_fits_the_context(
    demo_pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = demo_pipeline.engine
    assert isinstance(client, AsyncEngine)  # the pipeline's own wrapper of the LLMEngine
    monkeypatch.setattr(client.prompts, "max_model_len", 700)
    result = demo_pipeline.ask(
        "How do batching and the KV cache interact?", top_k=8, min_score=0.0, max_tokens=8
    )
    assert 1 <= len(result.passages) < 8
    assert result.usage.prompt_tokens <= 700 - 8
    scores = [p.score for p in result.passages]
    assert scores == sorted(scores, reverse=True)  # the least relevant ones were dropped
    with pytest.raises(InvalidInputError, match="do not fit"):
        demo_pipeline.ask("What is a KV cache?", max_tokens=690)


def test_invalid_sampling_values_are_input_errors(demo_pipeline: Pipeline) -> None:
    with pytest.raises(InvalidInputError, match="temperature"):
        demo_pipeline.ask("What is a KV cache?", temperature=9.0)
    with pytest.raises(InvalidInputError, match="top_k"):
        demo_pipeline.ask("What is a KV cache?", top_k=0)


def test_asking_while_ingesting_from_other_threads(demo_pipeline: Pipeline) -> None:
    """The server runs these concurrently: the shared embedder and index must cope."""
    from concurrent.futures import ThreadPoolExecutor

    from rag.retrieval.documents import Document

    collection = demo_pipeline.collections.get("demo")
    long_text = " ".join(f"Fact {i}: the cache line {i} holds {i * 7} bytes." for i in range(400))
    docs = [Document(f"bulk-{n}", long_text + f" Variant {n}.") for n in range(6)]
    with ThreadPoolExecutor(max_workers=3) as pool:
        ingesting = pool.submit(collection.ingest, docs)
        asking = [
            pool.submit(demo_pipeline.ask, "What does a KV cache avoid recomputing?", max_tokens=4)
            for _ in range(3)
        ]
        report = ingesting.result()
        results = [f.result() for f in asking]
    assert all(r.passages for r in results)
    # Chunking ran beside embedding: every chunk is still within the size limit.
    chunk_size = collection.info().chunk_size
    assert report.num_chunks >= 6 * 2
    for doc in docs:
        for chunk in collection.chunker.split(doc):
            assert len(demo_pipeline.embedder.tokenize(chunk.text)) <= chunk_size


def test_the_transformers_generator_is_a_drop_in_replacement(
    demo_pipeline: Pipeline, generator: HFGenerator
) -> None:
    """RAGGUARD_GENERATOR=hf: same pipeline, same answer shape, and greedy gives the same text."""
    from rag.pipeline import Pipeline

    hf_pipeline = Pipeline(demo_pipeline.settings, demo_pipeline.embedder, generator)
    question = "What does a KV cache avoid recomputing?"
    ours, theirs = demo_pipeline.ask(question), hf_pipeline.ask(question)
    assert theirs.answer == ours.answer
    assert [c.chunk_id for c in theirs.citations] == [c.chunk_id for c in ours.citations]


def test_settings_choose_the_generator_backend() -> None:
    from engine import EngineConfig, backends, build_engine_client

    assert {"engine", "hf"} <= set(backends())
    with pytest.raises(ValueError, match="unknown generator backend"):
        build_engine_client(EngineConfig(), "vllm")


def test_every_answer_is_checked_and_decided(demo_pipeline: Pipeline) -> None:
    result = demo_pipeline.ask("What does a KV cache avoid recomputing?")
    names = {g.name for g in result.guard_results}
    # every registered guard, the graph's included
    assert names == set(registered_guards())
    assert result.samples and result.samples[0].text == result.answer
    assert result.verification is None  # self-verification is off by default
    assert result.decision == "answer" and result.confidence is not None
    assert 0.2 <= result.confidence <= 1.0
    assert next(g for g in result.guard_results if g.name == "grounding").outcome == "pass"
    assert (
        next(g for g in result.guard_results if g.name == "self_consistency").outcome == "abstain"
    )  # one sample
    assert "guards_s" in result.timings


def test_self_verification_asks_the_generator_on_the_shared_prefix(demo_pipeline: Pipeline) -> None:
    from rag.pipeline import Pipeline

    settings = demo_pipeline.settings.updated(**{"self_verification": True})
    pipeline = Pipeline(settings, demo_pipeline.embedder, demo_pipeline.engine)
    try:
        result = pipeline.ask("What does a KV cache avoid recomputing?")
    finally:
        pipeline.close()
    assert result.verification is not None and 0.0 <= result.verification <= 1.0
    assert "verify_s" in result.timings
    assert result.confidence_signals["p_true"] == pytest.approx(result.verification - 0.5)
    verdict = next(g for g in result.guard_results if g.name == "self_verification")
    assert verdict.outcome in ("pass", "fail") and verdict.score == result.verification


def test_low_confidence_goes_to_review_durably_or_abstains(demo_pipeline: Pipeline) -> None:
    from guards.review import ReviewStore, Status

    question = "What does a KV cache avoid recomputing?"
    reviewed = demo_pipeline.ask(question, abstain_below=0.0, review_below=0.9999)
    assert reviewed.decision == "review" and reviewed.review_id and not reviewed.abstained
    store = ReviewStore(
        demo_pipeline.settings.review.data_dir / "reviews.sqlite"
    )  # a second connection
    item = store.get(reviewed.review_id)
    assert item.answer == reviewed.answer and item.status is Status.PENDING
    assert item.guard_results and item.passages and item.candidates == [reviewed.answer]
    assert item.index_name == "demo" and item.request_id == reviewed.request_id
    assert [i.id for i in store.list_items(status=Status.PENDING)[0]] == [reviewed.review_id]
    store.close()

    refused = demo_pipeline.ask(question, abstain_below=0.9999, review_below=0.9999)
    assert refused.decision == "abstain" and refused.abstained and refused.answer == "I don't know."
    assert refused.citations == [] and refused.abstain_reason
    assert "confidence" in refused.abstain_reason
    # The overrides were this request's only: the configured policy still answers.
    assert demo_pipeline.ask(question).decision == "answer"
    with pytest.raises(InvalidInputError, match="abstain_below <= review_below"):
        demo_pipeline.ask(question, abstain_below=0.8, review_below=0.5)


def test_several_candidates_vote(demo_pipeline: Pipeline) -> None:
    demo_pipeline.settings.guards.num_candidates = 3
    result = demo_pipeline.ask("What does a KV cache avoid recomputing?", seed=5, max_tokens=24)
    consistency = next(g for g in result.guard_results if g.name == "self_consistency")
    assert (
        consistency.outcome in ("pass", "fail") and sum(consistency.evidence["cluster_sizes"]) == 3
    )
    assert result.usage.completion_tokens > 24  # three samples were generated


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("int8", "int8"),
        ("int4", "int4"),
        ("w8a8", "w8a8"),
        ("", None),
        ("none", None),
        ("None", None),
        ("auto", "auto"),
    ],
)
def test_the_quantization_setting_reaches_the_engine_config(
    value: str, expected: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rag.settings import Settings

    monkeypatch.setenv("RAGGUARD_QUANTIZATION", value)
    assert Settings(_env_file=None).engine.engine_config().quantization == expected


def test_the_default_lets_the_engine_choose_and_float32_stays_a_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``auto`` reaches our engine, which picks per model at load (tests/engine/test_int4.py);
    the transformers and remote backends get the model's own weights."""
    from rag.settings import Settings

    monkeypatch.delenv("RAGGUARD_QUANTIZATION", raising=False)
    assert Settings(device="cpu", _env_file=None).engine.engine_config().quantization == "auto"
    assert Settings(device="cuda", _env_file=None).engine.engine_config().quantization == "auto"
    assert Settings(generator="hf", _env_file=None).engine.engine_config().quantization is None
    assert Settings(quantization=None, _env_file=None).engine.engine_config().quantization is None


def test_max_num_seqs_reaches_the_engine_and_the_old_name_is_still_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rag.settings import Settings

    assert Settings(max_num_seqs=5, _env_file=None).engine.engine_config().max_num_seqs == 5
    monkeypatch.setenv("RAGGUARD_MAX_BATCH_SIZE", "7")
    assert Settings(_env_file=None).engine.engine_config().max_num_seqs == 7
    monkeypatch.setenv("RAGGUARD_MAX_NUM_SEQS", "9")  # the current name wins
    assert Settings(_env_file=None).engine.engine_config().max_num_seqs == 9


def test_an_unknown_quantization_setting_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    from rag.settings import Settings

    monkeypatch.setenv("RAGGUARD_QUANTIZATION", "int3")
    with pytest.raises(ValidationError, match="int8"):
        Settings(_env_file=None)


def test_the_speculative_settings_reach_the_engine_config(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    from rag.settings import Settings

    monkeypatch.setenv("RAGGUARD_SPECULATIVE", "prompt_lookup")
    monkeypatch.setenv("RAGGUARD_NUM_SPECULATIVE_TOKENS", "6")
    monkeypatch.setenv("RAGGUARD_PROMPT_LOOKUP_MIN", "2")
    config = Settings(_env_file=None).engine.engine_config()
    assert (config.speculative, config.num_speculative_tokens, config.prompt_lookup_min) == (
        "prompt_lookup",
        6,
        2,
    )
    monkeypatch.setenv("RAGGUARD_SPECULATIVE", "")
    assert Settings(_env_file=None).engine.engine_config().speculative is None
    monkeypatch.setenv("RAGGUARD_PROMPT_LOOKUP_MIN", "5")
    with pytest.raises(ValidationError, match="prompt_lookup_min"):
        Settings(_env_file=None)


def test_the_system_prompt_is_a_setting_and_self_verification_shares_it(
    pipeline: Pipeline, settings: Settings
) -> None:
    from rag.stages.check.verification import SelfVerifier
    from rag.stages.generate import GenerateStage
    from rag.types import AskOptions

    rule = "Answer in three words from the passages below."
    custom = settings.updated(**{"system_prompt": rule})
    passages = [Passage("d1", "d1#0", "Alpha text.", 0.9)]
    plan = GenerateStage(pipeline.engine, custom).plan("Why?", passages, AskOptions())
    assert rule in plan.prompt and "I don't know" not in plan.prompt
    default = GenerateStage(pipeline.engine, settings).plan("Why?", passages, AskOptions())
    assert rule not in default.prompt and "I don't know" in default.prompt
    # Self-verification asks on the answer's own conversation: its prompt starts with the plan's.
    verify = SelfVerifier(pipeline.engine, rule).prompt("Why?", passages, "Alpha.")
    assert verify.startswith(plan.prompt)
