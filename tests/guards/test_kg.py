from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from guards import (
    Claim,
    ClaimVerdict,
    GuardContext,
    KnowledgeGraph,
    KnowledgeGraphGuard,
    Outcome,
    check_answer,
)
from guards.kg import normalize_name
from rag.eval.movies import MOVIE_RELATION_PHRASES

ROOT = Path(__file__).resolve().parents[2]
METAQA = ROOT.parent / "shared" / "data" / "metaqa_wikimovies" / "kb" / "kb_reconstructed.txt"
TRIPLES = [
    ("Kismet", "directed_by", "William Dieterle"),
    ("Kismet", "release_year", "1944"),
    ("Kismet", "starred_actors", "Ronald Colman"),
    ("Kismet", "starred_actors", "Marlene Dietrich"),
    ("The Matrix", "directed_by", "Lana Wachowski"),
    ("The Matrix", "directed_by", "Lilly Wachowski"),
    ("The Matrix", "release_year", "1999"),
    ("Bound", "directed_by", "Lana Wachowski"),
    ("Bound", "starred_actors", "Jennifer Tilly"),
    ("Made", "directed_by", "Jon Favreau"),
    ("Amélie", "release_year", "2001"),
]


@pytest.fixture
def kg() -> KnowledgeGraph:
    return KnowledgeGraph(
        TRIPLES,
        aliases={"Matrix 1": "The Matrix"},
        functional_relations={"release_year", "directed_by"},
        relation_phrases=MOVIE_RELATION_PHRASES,
    )


def verdicts(
    kg: KnowledgeGraph, answer: str, question: str = ""
) -> list[tuple[str, str, str, ClaimVerdict]]:
    return [
        (c.claim.subject, c.claim.relation, c.claim.object, c.verdict)
        for c in check_answer(kg, answer, question)
    ]


def test_normalisation_aliases_and_fuzzy_resolution(kg: KnowledgeGraph) -> None:
    assert normalize_name("  The MATRIX!! ") == "matrix"
    assert kg.resolve("the matrix") == "The Matrix" and kg.resolve("Matrix 1") == "The Matrix"
    assert kg.resolve("Amelie") == "Amélie"  # accents folded
    assert kg.resolve("William Deiterle") == "William Dieterle"  # fuzzy
    assert kg.resolve("William Deiterle", fuzzy=False) is None
    assert kg.resolve("Nobody At All") is None


def test_supported_contradicted_and_unknown(kg: KnowledgeGraph) -> None:
    assert verdicts(kg, "Kismet was directed by William Dieterle.") == [
        ("Kismet", "directed_by", "William Dieterle", ClaimVerdict.SUPPORTED)
    ]
    assert verdicts(kg, "It came out in 1999.", "When was Kismet released?") == [
        ("Kismet", "release_year", "1999", ClaimVerdict.CONTRADICTED)
    ]
    # Not in the graph is not false: starred_actors is not functional. (A director is not a
    # possible cast member in this small graph, so only an actor makes a claim at all.)
    assert verdicts(kg, "Kismet starred Lana Wachowski.") == []
    assert verdicts(kg, "Kismet starred Jennifer Tilly.") == [
        ("Kismet", "starred_actors", "Jennifer Tilly", ClaimVerdict.UNKNOWN)
    ]
    # Two directors: either is supported.
    assert (
        verdicts(kg, "The Matrix was directed by Lilly Wachowski.")[0][3] is ClaimVerdict.SUPPORTED
    )


def test_each_entity_takes_the_nearest_relation(kg: KnowledgeGraph) -> None:
    found = verdicts(kg, "Kismet was directed by William Dieterle and released in 1944.")
    assert found == [
        ("Kismet", "directed_by", "William Dieterle", ClaimVerdict.SUPPORTED),
        ("Kismet", "release_year", "1944", ClaimVerdict.SUPPORTED),
    ]


def test_lower_case_common_words_are_not_titles(kg: KnowledgeGraph) -> None:
    # "Made" is a film; "made" in a sentence is a verb.
    assert verdicts(kg, "Kismet was directed by William Dieterle; a remake was made later.") == [
        ("Kismet", "directed_by", "William Dieterle", ClaimVerdict.SUPPORTED)
    ]
    assert verdicts(kg, "jon favreau directed made") == [
        ("Made", "directed_by", "Jon Favreau", ClaimVerdict.SUPPORTED)
    ]


def test_paths_between_entities(kg: KnowledgeGraph) -> None:
    paths = kg.paths("Bound", "The Matrix", max_hops=2)
    assert [
        ("Bound", "directed_by", "Lana Wachowski"),
        ("The Matrix", "directed_by", "Lana Wachowski"),
    ] in paths


def test_guard_outcomes(kg: KnowledgeGraph) -> None:
    guard = KnowledgeGraphGuard(kg)
    ok = guard.check(GuardContext("Who directed Kismet?", "William Dieterle directed it."))
    assert ok.outcome is Outcome.PASS and ok.evidence["claims"][0]["verdict"] == "supported"
    bad = guard.check(GuardContext("When was Kismet released?", "Kismet was released in 1999."))
    assert bad.outcome is Outcome.FAIL and "1944" in bad.reason and bad.score == 0.0
    unknown = guard.check(GuardContext("Who starred in Kismet?", "Kismet starred Jennifer Tilly."))
    assert unknown.outcome is Outcome.ABSTAIN and "unknown is not false" in unknown.reason
    nothing = guard.check(GuardContext("What is a KV cache?", "It stores keys and values."))
    assert nothing.outcome is Outcome.ABSTAIN
    assert guard.check(GuardContext("q", "  ")).outcome is Outcome.ABSTAIN


def test_file_formats_and_malformed_lines(tmp_path: Path) -> None:
    (tmp_path / "g.txt").write_text("# comment\nA|rel|B\n\nB|rel|C\n")
    (tmp_path / "g.tsv").write_text("A\trel\tB\n")
    (tmp_path / "g.jsonl").write_text(
        json.dumps({"subject": "A", "relation": "rel", "object": "B"}) + "\n"
    )
    (tmp_path / "aliases.txt").write_text("alpha|A\n")
    txt = KnowledgeGraph.from_file(tmp_path / "g.txt", aliases_path=tmp_path / "aliases.txt")
    assert len(txt) == 2 and txt.resolve("alpha") == "A"
    assert txt.check(Claim("A", "rel", "B")).verdict is ClaimVerdict.SUPPORTED
    assert len(KnowledgeGraph.from_file(tmp_path / "g.tsv")) == 1
    assert len(KnowledgeGraph.from_file(tmp_path / "g.jsonl")) == 1
    (tmp_path / "bad.txt").write_text("A|rel|B\nA|rel\n")
    with pytest.raises(ValueError, match="line 2"):
        KnowledgeGraph.from_file(tmp_path / "bad.txt")


def test_the_demo_graph_loads_with_its_aliases() -> None:
    data = ROOT / "rag" / "data"
    demo = KnowledgeGraph.from_file(data / "demo_kg.txt", aliases_path=data / "demo_kg_aliases.txt")
    assert len(demo) >= 150
    assert demo.resolve("key-value cache") == demo.resolve("kv cache") is not None


@pytest.mark.skipif(not METAQA.is_file(), reason="the shared MetaQA data is not present")
def test_metaqa_gold_claims_with_surface_noise_are_supported_and_corruptions_are_not() -> None:
    kg = KnowledgeGraph.from_file(
        METAQA, functional_relations={"release_year"}, relation_phrases=MOVIE_RELATION_PHRASES
    )
    rng = random.Random(0)
    lines = [line.split("|") for line in METAQA.read_text(encoding="utf-8").splitlines()]
    years = sorted({o for _, r, o in lines if r == "release_year"})
    sample = [t for t in rng.sample(lines, 400) if t[1] == "release_year" and normalize_name(t[0])][
        :40
    ]
    assert len(sample) >= 20
    for subject, relation, obj in sample:
        noisy = subject.upper().removeprefix("THE ")
        assert kg.resolve(noisy) is not None, subject
        claim = Claim(kg.resolve(noisy) or "", relation, kg.resolve(obj) or "")
        assert kg.check(claim).verdict is ClaimVerdict.SUPPORTED
        wrong = rng.choice([y for y in years if y not in kg.objects(claim.subject, relation)])
        assert kg.check(Claim(claim.subject, relation, wrong)).verdict is ClaimVerdict.CONTRADICTED


def test_demo_graph_declares_functional_presets_and_catches_a_wrong_value() -> None:
    data = ROOT / "rag" / "data"
    demo = KnowledgeGraph.from_file(data / "demo_kg.txt", aliases_path=data / "demo_kg_aliases.txt")
    assert "has_temperature" in demo.functional_relations
    guard = KnowledgeGraphGuard(demo)
    question = "What temperature does the technical preset use?"
    wrong = guard.check(GuardContext(question, "The technical preset uses a temperature of 0.9."))
    assert wrong.outcome is Outcome.FAIL and "0.3" in wrong.reason
    right = guard.check(GuardContext(question, "The technical preset uses a temperature of 0.3."))
    assert right.outcome is Outcome.PASS


def test_each_value_goes_to_its_nearest_subject_and_accents_link() -> None:
    data = ROOT / "rag" / "data"
    demo = KnowledgeGraph.from_file(data / "demo_kg.txt", aliases_path=data / "demo_kg_aliases.txt")
    guard = KnowledgeGraphGuard(demo)
    both = "The creative preset uses a temperature of 0.9, while the dialogue preset uses a temperature of 0.7."
    result = guard.check(GuardContext("Which temperatures do the presets use?", both))
    assert result.outcome is Outcome.PASS, result.reason
    swapped = "The creative preset uses a temperature of 0.7, while the dialogue preset uses a temperature of 0.9."
    assert (
        guard.check(GuardContext("Which temperatures do the presets use?", swapped)).outcome
        is Outcome.FAIL
    )
    kg = KnowledgeGraph(
        TRIPLES, functional_relations={"release_year"}, relation_phrases=MOVIE_RELATION_PHRASES
    )
    assert [m.node for m in kg.link("Amélie came out in 2001.")] == ["Amélie", "2001"]


MOVIE_TRIPLES = [
    ("The Big Sleep", "directed_by", "Howard Hawks"),
    ("The Big Sleep", "has_tags", "film noir"),
    ("The Big Sleep", "has_tags", "remake"),
    ("The Big Sleep", "in_language", "English"),
    ("Shaft", "starred_actors", "Richard Roundtree"),
    ("Shaft", "has_tags", "blaxploitation"),
    ("Shaft", "has_imdb_rating", "good"),
    ("Welcome", "in_language", "French"),
    ("Welcome", "release_year", "2009"),
    ("Goon", "has_tags", "hockey"),
    ("Goon", "has_tags", "comedy"),
    ("Goon", "has_genre", "Comedy"),
    ("Made", "directed_by", "Jon Favreau"),
    ("Bad Teacher", "has_imdb_rating", "bad"),
]


@pytest.fixture
def movies() -> KnowledgeGraph:
    return KnowledgeGraph(
        MOVIE_TRIPLES,
        functional_relations={"release_year", "directed_by", "has_imdb_rating"},
        relation_phrases=MOVIE_RELATION_PHRASES,
    )


def supported(kg: KnowledgeGraph, answer: str, question: str = "") -> set[tuple[str, str, str]]:
    return {
        (s, r, o) for s, r, o, v in verdicts(kg, answer, question) if v is ClaimVerdict.SUPPORTED
    }


def test_tag_claims_in_their_usual_phrasings_are_supported(movies: KnowledgeGraph) -> None:
    # Tags are written in lower case, like ordinary words, yet they are the claim's value.
    for answer in (
        "Goon is tagged hockey.",
        "Goon has the tag hockey.",
        "Goon is about hockey.",
        "The tags of Goon include hockey.",
    ):
        assert supported(movies, answer) == {("Goon", "has_tags", "hockey")}, answer
    assert ("Goon", "has_tags", "hockey") in supported(movies, "Hockey.", "What is Goon about?")


def test_title_in_capitals_and_lower_case_title_claims_are_supported(
    movies: KnowledgeGraph,
) -> None:
    assert supported(movies, "THE BIG SLEEP is tagged remake.") == {
        ("The Big Sleep", "has_tags", "remake")
    }
    assert supported(movies, "BIG SLEEP was directed by Howard Hawks.") == {
        ("The Big Sleep", "directed_by", "Howard Hawks")
    }
    # A title that is also an English word, written in lower case in a mixed-case answer.
    assert supported(movies, "shaft starred Richard Roundtree.") == {
        ("Shaft", "starred_actors", "Richard Roundtree")
    }
    assert supported(movies, "SHAFT has a rating of good.") == {
        ("Shaft", "has_imdb_rating", "good")
    }


def test_language_claims_are_supported(movies: KnowledgeGraph) -> None:
    for answer in (
        "The language of welcome is French.",
        "Welcome is in French.",
        "WELCOME is a French-language film.",
    ):
        assert supported(movies, answer) == {("Welcome", "in_language", "French")}, answer
    # "in" speaks of a language only before one: a year after it is still a release year.
    assert supported(movies, "Welcome was released in 2009.") == {
        ("Welcome", "release_year", "2009")
    }


def test_corrupted_tag_and_language_claims_are_not_supported(movies: KnowledgeGraph) -> None:
    for answer in (
        "SHAFT is tagged remake.",
        "shaft is tagged remake.",
        "Shaft is about hockey.",
        "THE BIG SLEEP is tagged blaxploitation.",
        "The language of welcome is English.",
    ):
        assert not supported(movies, answer), answer
    assert verdicts(movies, "SHAFT has a rating of bad.") == [
        ("Shaft", "has_imdb_rating", "bad", ClaimVerdict.CONTRADICTED)
    ]


def test_a_lower_case_word_is_a_title_only_when_the_graph_confirms_the_claim(
    movies: KnowledgeGraph,
) -> None:
    # "made" might be the film Made; read so, it would contradict the graph: it is a verb.
    assert verdicts(movies, "It was made in Paris and directed by Howard Hawks.") == []
    assert verdicts(movies, "It was made by Howard Hawks.") == []
    # The question's film comes before a weak word of the answer as the claim's subject.
    assert verdicts(movies, "It was made by Howard Hawks.", "Who directed The Big Sleep?") == [
        ("The Big Sleep", "directed_by", "Howard Hawks", ClaimVerdict.SUPPORTED)
    ]
    assert supported(movies, "Jon Favreau directed made.") == {
        ("Made", "directed_by", "Jon Favreau")
    }
