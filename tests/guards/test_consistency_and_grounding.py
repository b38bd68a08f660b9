from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pytest

from guards import (
    Candidate,
    ConfidenceModel,
    GroundingGuard,
    GuardContext,
    GuardPassage,
    Outcome,
    SelfConsistencyGuard,
    cluster_answers,
    features,
)
from guards.text import normalize, quoted_share

if TYPE_CHECKING:
    from guards.embedder import Embedder as GuardEmbedder
    from rag.retrieval.embed import Embedder


def ctx(answer: str, samples: list[str]) -> GuardContext:
    return GuardContext(
        "Who directed Kismet?", answer, candidates=tuple(Candidate(s) for s in samples)
    )


def test_normalisation_and_exact_vote() -> None:
    assert normalize("  The Paris! ") == normalize("paris")
    # Answers: an apostrophe breaks words, so "Nolan" is found in "Nolan's film"; names: "I'll"
    # and "Ill" are one title, and only a leading article goes.
    assert normalize("Christopher Nolan's 2010 film") == "christopher nolan s 2010 film"
    assert normalize("I'll See You in My Dreams", articles="leading") == "ill see you in my dreams"
    assert normalize("The Lord of the Rings", articles="leading") == "lord of the rings"
    vote = cluster_answers(["Paris.", "paris", "Lyon", "The Paris"])
    assert sorted(vote.majority) == [0, 1, 3] and vote.agreement == 0.75
    assert vote.semantic_entropy == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    assert cluster_answers(["x", "x"]).semantic_entropy == 0.0


def test_guard_passes_agreement_fails_disagreement_and_abstains_alone() -> None:
    guard = SelfConsistencyGuard(min_agreement=0.6)
    agree = guard.check(
        ctx("William Dieterle", ["William Dieterle.", "william dieterle", "Jon Favreau"])
    )
    assert agree.outcome is Outcome.PASS and agree.score == pytest.approx(2 / 3)
    disagree = guard.check(
        ctx("Jon Favreau", ["William Dieterle", "William Dieterle", "Jon Favreau"])
    )
    assert disagree.outcome is Outcome.FAIL and disagree.evidence["cluster_sizes"] == [2, 1]
    assert guard.check(ctx("x", ["y"])).outcome is Outcome.ABSTAIN  # fewer than two samples


def test_the_answers_own_sample_does_not_vote_for_it() -> None:
    guard = SelfConsistencyGuard(min_agreement=0.5)
    # The answer is sample 0; the only other sample disagrees: 0 % agreement, not 50 %.
    lone = guard.check(ctx("William Dieterle", ["William Dieterle", "Jon Favreau"]))
    assert lone.outcome is Outcome.FAIL and lone.score == 0.0
    backed = guard.check(ctx("William Dieterle", ["William Dieterle", "william dieterle."]))
    assert backed.outcome is Outcome.PASS and backed.score == 1.0


def test_embeddings_merge_paraphrases(embedder: Embedder) -> None:
    samples = [
        "The KV cache stores keys and values of earlier tokens.",
        "It keeps the key and value tensors of previous tokens.",
        "Bananas are yellow.",
    ]
    lexical = cluster_answers(samples)
    semantic = cluster_answers(samples, _RagEmbedder(embedder), threshold=0.6)
    assert len(lexical.clusters) == 3 and len(semantic.clusters) == 2


class _RagEmbedder:
    """rag.retrieval.embed.Embedder through the guards' protocol (as rag will wire it)."""

    def __init__(self, embedder: Embedder) -> None:
        self.inner = embedder

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.inner.embed(texts)


PASSAGES = (
    GuardPassage("kv#0", "A KV cache stores the key and value tensors of previous tokens."),
    GuardPassage("batch#0", "Continuous batching lets new requests join between decoding steps."),
)


def grounding(answer: str, embedder: GuardEmbedder | None = None) -> tuple[Outcome, dict]:
    result = GroundingGuard(embedder).check(GuardContext("q", answer, passages=PASSAGES))
    return result.outcome, dict(result.evidence)


def test_supported_sentences_pass_with_or_without_markers() -> None:
    assert (
        grounding("The KV cache stores key and value tensors of previous tokens [1].")[0]
        is Outcome.PASS
    )
    assert grounding("New requests join between decoding steps.")[0] is Outcome.PASS


def test_wrong_or_dangling_citations_and_unsupported_claims_fail() -> None:
    outcome, evidence = grounding(
        "The KV cache stores key and value tensors of previous tokens [2]."
    )
    assert outcome is Outcome.FAIL and len(evidence["unsupported_sentences"]) == 1
    outcome, evidence = grounding("The KV cache stores key and value tensors [7].")
    assert outcome is Outcome.FAIL and evidence["dangling_citations"] == [7]
    outcome, _ = grounding("Quantization to four bits halves the latency on phones.")
    assert outcome is Outcome.FAIL


def test_grounding_abstains_without_passages_or_statements() -> None:
    assert GroundingGuard().check(GuardContext("q", "Anything.")).outcome is Outcome.ABSTAIN
    assert (
        GroundingGuard().check(GuardContext("q", "[1]", passages=PASSAGES)).outcome
        is Outcome.ABSTAIN
    )


def test_embedding_support_accepts_a_paraphrase(embedder: Embedder) -> None:
    paraphrase = "It keeps earlier tokens' keys and values around."
    assert grounding(paraphrase)[0] is Outcome.FAIL  # too few shared words
    assert grounding(paraphrase, _RagEmbedder(embedder))[0] is Outcome.PASS


def test_a_negated_claim_is_not_grounded_by_the_positive_statement(embedder: Embedder) -> None:
    negated = "A KV cache does not store the key and value tensors of previous tokens [1]."
    assert grounding(negated)[0] is Outcome.FAIL
    assert grounding(negated, _RagEmbedder(embedder))[0] is Outcome.FAIL
    denial = (
        GuardPassage("n#0", "Greedy decoding does not sample: it never picks a random token."),
    )
    ok = GroundingGuard().check(
        GuardContext("q", "Greedy decoding does not sample.", passages=denial)
    )
    assert ok.outcome is Outcome.PASS


def test_grounding_measures_quoting_unsupported_words_and_new_names() -> None:
    _, quoted = grounding("It stores the key and value tensors [1].")
    assert quoted["quoted_share"] == pytest.approx(6 / 7)  # "It" is in no two-word run
    assert quoted["unsupported_words"] == [] and quoted["novel_terms"] == []
    _, invented = grounding("Mumbai hosts 3 caches built by Intel in 1999.")
    assert invented["quoted_share"] == 0.0 and invented["coverage"] == 0.0
    assert set(invented["unsupported_words"]) >= {"mumbai", "intel", "1999"}
    assert invented["novel_terms"] == ["1999", "3", "intel", "mumbai"]
    assert quoted_share("Delhi", "head office in Delhi.") == 1.0  # a one-word answer
    assert quoted_share("", "anything") == 0.0


def test_grounding_signals_feed_the_confidence() -> None:
    def confidence(answer: str) -> float:
        result = GroundingGuard().check(GuardContext("q", answer, passages=PASSAGES))
        return ConfidenceModel.prior().score(features([result]))

    assert confidence("A KV cache stores the key and value tensors of previous tokens [1].") > 0.8
    assert confidence("Mumbai hosts 3 caches built by Intel in 1999.") < 0.1
