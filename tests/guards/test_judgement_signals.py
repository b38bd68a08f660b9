"""The judgement signals on crafted cases, and the guard registry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import ClassVar

import pytest

from guards import Candidate, Guard, GuardChain, GuardContext, GuardPassage, GuardResult, Outcome
from guards.alignment import AnswerEvidenceGuard, context_match
from guards.answers import (
    QuestionKind,
    answer_core,
    choice_options,
    kind_matches,
    question_kind,
    verdict,
)
from guards.confidence import features
from guards.conflict import EvidenceConflictGuard
from guards.consistency import SelfConsistencyGuard
from guards.polarity import finding_polarity
from guards.registry import (
    GuardDeps,
    UnknownGuardError,
    build_guards,
    register_guard,
    registered_guards,
    unregister_guard,
)
from guards.verification import SelfVerificationGuard

HANDBOOK = GuardPassage("h#0", "New hires get 25 vacation days per year. Managers approve leave.")
OTHER = GuardPassage("o#0", "The cafeteria opens at 8 am and closes at 3 pm on weekdays.")


def ctx(
    question: str,
    answer: str,
    passages: tuple[GuardPassage, ...] = (HANDBOOK, OTHER),
    samples: tuple[str, ...] = (),
    verification: float | None = None,
) -> GuardContext:
    candidates = tuple(Candidate(t, finish_reason="stop") for t in (answer, *samples))
    return GuardContext(question, answer, passages, candidates, verification)


def test_answer_core_and_kinds() -> None:
    assert answer_core("1. The answer is: 25 days [1]. Managers approve.") == "25 days"
    assert answer_core("Based on the passages, Paris.") == "Paris"
    assert question_kind("Is aspirin effective? Answer yes, no or maybe.") is QuestionKind.YES_NO
    assert question_kind("How many vacation days do new hires get?") is QuestionKind.NUMBER
    assert question_kind("Who directed Kismet?") is QuestionKind.PERSON
    assert question_kind("What genre is Kismet?") is QuestionKind.OTHER
    assert verdict("No, the answer is not yes.") == "no"
    assert verdict("1. Yes, no or maybe.") is None  # lists the options: no verdict


def test_a_choice_question_wants_one_of_its_options() -> None:
    assert choice_options("Who is the oldest, Sid Haig or Vic Darchinyan?") == (
        "Sid Haig",
        "Vic Darchinyan",
    )
    assert choice_options("Which band was formed first The Exies or Circus Diablo ?") == (
        "The Exies",
        "Circus Diablo",
    )
    assert choice_options("Was Tom or Jerry born first?") == ("Tom", "Jerry")
    assert choice_options("Is aspirin effective? Answer yes, no or maybe.") is None
    assert choice_options("Which of the two outbreaks killed the most people?") is None
    question = "Which plant is larger, the Pterocarya or the Cotula?"
    assert question_kind(question) is QuestionKind.CHOICE
    assert kind_matches(QuestionKind.CHOICE, "The larger plant is the Cotula. [2]", question)
    assert not kind_matches(QuestionKind.CHOICE, "Both plants are large.", question)
    result = AnswerEvidenceGuard().check(ctx(question, "Plants grow in gardens."))
    assert result.signals["kind_match"] == -0.5 and "neither option" in result.reason


def test_a_verbatim_supported_answer_scores_high_and_a_contradicting_one_low() -> None:
    guard = AnswerEvidenceGuard()
    question = "How many vacation days do new hires get?"
    right = guard.check(ctx(question, "New hires get 25 vacation days per year. [1]"))
    assert right.outcome is Outcome.PASS and right.signals["span_in_top_passage"] == 0.5
    wrong = guard.check(ctx(question, "They get 40 days off."))
    assert wrong.outcome is Outcome.FAIL
    assert wrong.signals["span_in_passages"] < right.signals["span_in_passages"]
    # A restatement of the question answers nothing.
    restated = guard.check(ctx(question, "New hires get vacation days."))
    assert restated.signals["answers_question"] == -0.5 and "restates" in restated.reason
    # The wrong kind: a "how many" question answered without a number.
    kind = guard.check(ctx(question, "Managers approve leave."))
    assert kind.signals["kind_match"] == -0.5


def test_the_top_passage_is_the_best_scored_whatever_the_prompt_order() -> None:
    # The prompt shows passages in a canonical order, not by rank: "top" follows the scores.
    question = "How many vacation days do new hires get?"
    answer = "New hires get 25 vacation days per year. [2]"
    handbook, other = replace(HANDBOOK, score=0.9), replace(OTHER, score=0.4)
    guard = AnswerEvidenceGuard()
    best_second = guard.check(ctx(question, answer, (other, handbook)))
    assert best_second.signals["span_in_top_passage"] == 0.5
    worst_second = guard.check(ctx(question, answer, (replace(other, score=0.95), handbook)))
    assert worst_second.signals["span_in_top_passage"] < 0
    assert [e.passage_id for e in ctx(question, answer, (other, handbook)).ranked] == [
        "h#0",
        "o#0",
    ]


def test_i_dont_know_is_neither_supported_nor_contradicted() -> None:
    question = "How many vacation days do new hires get?"
    for guard in (AnswerEvidenceGuard(), EvidenceConflictGuard()):
        result = guard.check(ctx(question, "I don't know."))
        assert result.outcome is Outcome.ABSTAIN and not result.signals


def test_conflicting_passages_are_found() -> None:
    true = GuardPassage("t", "In 2020 the company was led by Alice Martin, its chief executive.")
    fake = GuardPassage("f", "In 2020 the company was led by Bruno Keller, its chief executive.")
    noise = GuardPassage("n", "The weather was mild in the spring.")
    question = "Who led the company in 2020?"
    guard = EvidenceConflictGuard()
    conflict = guard.check(ctx(question, "Alice Martin.", (true, fake, noise)))
    assert conflict.outcome is Outcome.FAIL and conflict.signals == {"conflict": 1.0}
    assert conflict.evidence["same_statement_other_value"] == [2]
    clean = guard.check(ctx(question, "Alice Martin.", (true, noise)))
    assert clean.outcome is Outcome.PASS
    # Samples that settle on another answer held by another passage are a conflict too.
    other = GuardPassage("o", "Bruno Keller was appointed to lead the company that year.")
    rival = guard.check(ctx(question, "Alice Martin.", (true, other), samples=("Bruno Keller",)))
    assert rival.outcome is Outcome.FAIL and rival.evidence["rival_answers"] == ["Bruno Keller"]


def test_passages_that_disagree_are_found_when_the_answer_quotes_neither() -> None:
    true = GuardPassage("t", "In February 2014, Facebook bought the messaging service WhatsApp.")
    fake = GuardPassage("f", "In February 2014, Apple bought the messaging service WhatsApp.")
    longer = GuardPassage(
        "l", "In February 2014, Facebook bought the messaging service WhatsApp Inc."
    )
    noise = GuardPassage(
        "n", "WhatsApp lets people send messages and make calls over the internet."
    )
    question = "Who acquired WhatsApp?"
    guard = EvidenceConflictGuard()
    # The answer paraphrases: no passage holds it word for word, yet two passages disagree.
    answer = "WhatsApp was acquired in 2014 by the company Apple, for its messaging."
    conflict = guard.check(ctx(question, answer, (true, noise, fake)))
    assert conflict.outcome is Outcome.FAIL and conflict.signals == {"conflict": 1.0}
    assert conflict.evidence["disagreeing_passages"] == [[1, 3, ["apple", "facebook"]]]
    assert "[1] and [3]" in conflict.reason
    # A passage that only adds a name (nothing replaced) is not a disagreement; unrelated
    # passages are not either: nothing to compare.
    assert guard.check(ctx(question, answer, (true, longer, noise))).outcome is Outcome.ABSTAIN
    assert guard.check(ctx(question, answer, (true, noise))).outcome is Outcome.ABSTAIN
    # Two records written to one template are about different things, not copies.
    one = GuardPassage(
        "a", "Tremors. Directed by: Ron Underwood. Released in: 1990. Genre: Horror."
    )
    two = GuardPassage(
        "b", "Stir Crazy. Directed by: Sidney Poitier. Released in: 1980. Genre: Comedy."
    )
    template = guard.check(ctx("Who directed Tremors?", "It was Underwood's film.", (one, two)))
    assert template.outcome is Outcome.ABSTAIN


def test_semantic_entropy_and_agreement_compare_answer_cores() -> None:
    guard = SelfConsistencyGuard()
    question = "How many vacation days do new hires get?"
    same = guard.check(ctx(question, "25 days [1].", samples=("The answer is: 25 days.",) * 3))
    assert same.signals["agreement"] == 0.5 and same.signals["semantic_entropy"] == 0.5
    spread = guard.check(ctx(question, "25 days.", samples=("40 days", "3 days", "12 days")))
    assert spread.signals["agreement"] == -0.5
    assert spread.signals["semantic_entropy"] < same.signals["semantic_entropy"]
    # Yes/no answers agree on their verdict, whatever explanation follows.
    yes_no = guard.check(ctx("Is leave approved?", "Yes.", samples=("Yes, by managers.",) * 2))
    assert yes_no.signals["agreement"] == 0.5


def test_self_verification_turns_p_yes_into_a_signal() -> None:
    guard = SelfVerificationGuard()
    assert guard.check(ctx("q?", "a", verification=0.9)).signals == {"p_true": pytest.approx(0.4)}
    assert guard.check(ctx("q?", "a", verification=0.1)).outcome is Outcome.FAIL
    assert guard.check(ctx("q?", "a")).outcome is Outcome.ABSTAIN


class _LengthGuard(Guard):
    name = "answer_length"
    signals: ClassVar[Mapping[str, int]] = {"short_answer": 1}

    def check(self, ctx: GuardContext) -> GuardResult:
        short = len(ctx.answer.split()) <= 5
        return GuardResult(
            self.name, Outcome.PASS, 1.0, "counted", {}, {"short_answer": float(short) - 0.5}
        )


def test_a_registered_guard_is_built_and_its_signals_reach_the_features() -> None:
    register_guard("answer_length")(lambda deps: _LengthGuard())
    try:
        assert "answer_length" in registered_guards()
        guards = build_guards(["repetition", "answer_length"], GuardDeps())
        results = GuardChain(guards, audit=None).run(ctx("q?", "25 days.")).results
        assert features(results)["short_answer"] == 0.5
    finally:
        unregister_guard("answer_length")
    with pytest.raises(UnknownGuardError, match="answer_length"):
        build_guards(["answer_length"], GuardDeps())


def test_undeclared_signals_are_dropped() -> None:
    class Sloppy(_LengthGuard):
        signals: ClassVar[Mapping[str, int]] = {}

    (result,) = GuardChain([Sloppy()], audit=None).run(ctx("q?", "a")).results
    assert result.signals == {}


def test_the_graph_guard_needs_a_graph() -> None:
    names = [g.name for g in build_guards(None, GuardDeps())]
    assert "knowledge_graph" not in names and "answer_evidence" in names


def test_an_echoed_passage_label_is_not_part_of_the_answer() -> None:
    pasted = "Passage: [5] The Hukilau Song is a song written by Jack Owens in 1948. Passage: [2]"
    assert answer_core(pasted) == "The Hukilau Song is a song written by Jack Owens in 1948"


def test_context_match_wants_the_answer_stated_about_what_the_question_asks() -> None:
    question = "Who won the 2021 Tour de France?"
    right_year = ["The 2021 Tour de France was a success. Tadej Pogacar won the 2021 race."]
    other_year = ["Egan Bernal won the 2019 Tour de France. He is from Colombia."]
    about = context_match("Tadej Pogacar won it.", question, right_year)
    elsewhere = context_match("Egan Bernal won it.", question, other_year)
    assert about == 1.0  # 2021, Tour, France all beside the name (the first sentence counts)
    assert elsewhere is not None and elsewhere < about  # the sentence is about 2019
    assert context_match("Somebody else.", question, other_year) is None  # no passage holds it
    assert context_match("The 2021 Tour de France.", question, right_year) is None  # adds nothing
    ctx = GuardContext(question, "Egan Bernal won it.", (GuardPassage("t#0", other_year[0], 0.9),))
    result = AnswerEvidenceGuard().check(ctx)
    assert result.signals["context_match"] == pytest.approx(elsewhere - 0.5)


def test_a_yes_no_verdict_is_compared_with_the_direction_of_the_findings() -> None:
    negative = GuardPassage(
        "t#0",
        "Patients were randomised to drug or placebo. Pain scores did not differ: there was no "
        "significant difference between the groups.",
        0.9,
    )
    positive = GuardPassage(
        "t#1", "The drug significantly reduced pain and improved sleep compared to placebo.", 0.8
    )
    question = "Does the drug relieve pain?"
    guard = AnswerEvidenceGuard()

    def leaning(answer: str, passages: tuple[GuardPassage, ...]) -> float | None:
        return guard.check(ctx(question, answer, passages)).signals.get("verdict_evidence")

    # The best-ranked passage reports no effect: "no" agrees with it, "yes" goes against it.
    no_effect = leaning("No. [1]", (negative, positive))
    effect = leaning("Yes, it does. [1]", (negative, positive))
    assert no_effect is not None and effect is not None and no_effect > 0 > effect
    # The same answers when the best-ranked passage reports an effect.
    ranked_first = (replace(negative, score=0.1), positive)
    yes, no = leaning("Yes.", ranked_first), leaning("No.", ranked_first)
    polarity = finding_polarity(positive.text)
    assert yes is not None and no is not None and polarity is not None
    assert yes == 0.5 * polarity > 0 > no == -yes
    # No verdict, "maybe", or a passage stating no finding either way: no signal.
    assert leaning("It depends on the dose.", (negative,)) is None
    assert leaning("Maybe.", (negative,)) is None
    assert leaning("Yes.", (GuardPassage("x#0", "The trial ran in 2019 in Oslo.", 1.0),)) is None
    assert finding_polarity("The trial ran in 2019 in Oslo.") is None
