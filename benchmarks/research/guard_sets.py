"""The labelled data the guards are measured on that is built rather than read: claims written
from MetaQA triples (with surface noise, and paraphrased), the movie graph and its passages, and
prompts that make a model loop with the label of a loop.

Every random choice takes its ``random.Random`` from the caller, seeded from ``SEED``, so the
same sets come out on every run.
"""

from __future__ import annotations

import random
import time
import zlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from guards import KnowledgeGraph
from rag.eval.datasets import (
    MOVIE_LABELS,
    MetaQAQuestion,
    load_metaqa_questions,
    metaqa_kb_path,
    render_movie_passages,
)
from rag.eval.movies import MOVIE_FUNCTIONAL_RELATIONS, MOVIE_RELATION_PHRASES
from rag.retrieval.documents import Document

SEED = 0
Triple = tuple[str, str, str]
TEMPLATES = {
    "directed_by": "{s} was directed by {o}.",
    "written_by": "{s} was written by {o}.",
    "starred_actors": "{s} starred {o}.",
    "release_year": "{s} was released in {o}.",
    "in_language": "The language of {s} is {o}.",
    "has_genre": "The genre of {s} is {o}.",
    "has_tags": "{s} is tagged {o}.",
    "has_imdb_rating": "{s} has a rating of {o}.",
    "has_imdb_votes": "{s} has {o} votes.",
}
"""How a claim of each MetaQA relation is written (``s``: subject, ``o``: object)."""
PARAPHRASES = {
    "directed_by": ("{o} directed {s}.", "The director of {s} is {o}."),
    "written_by": ("{o} wrote {s}.", "The screenplay of {s} is by {o}."),
    "starred_actors": ("{o} starred in {s}.", "{s} stars {o}.", "The cast of {s} includes {o}."),
    "release_year": ("{s} came out in {o}.", "The release year of {s} is {o}."),
    "in_language": ("{s} is in {o}.", "{s} is a {o}-language film.", "{s} is spoken in {o}."),
    "has_genre": ("{s} is in the {o} genre.", "{s} belongs to the genre {o}."),
    "has_tags": ("{s} has the tag {o}.", "{s} is about {o}.", "The tags of {s} include {o}."),
    "has_imdb_rating": ("{s} is rated {o}.", "The IMDb rating of {s} is {o}."),
    "has_imdb_votes": ("{s} has {o} IMDb votes.", "The votes for {s} are {o}."),
}
"""Other ways of stating the same claims, measured apart (their own random stream) so that the
main figures stay comparable between runs: a check tuned to TEMPLATES alone shows up here."""
NOISE_KINDS = ("lower", "upper", "no_the", "no_punct", "as_is")
LOOP_PROMPTS = (
    "Write the letter A fifty times.",
    "Repeat the word cat many times.",
    "Count from 1 to 100.",
    "Say the word yes over and over.",
    "Write 'la la la' as a long song.",
    "Type the number 7 again and again.",
    "Write the alphabet ten times.",
    "List the days of the week, over and over.",
    "Write a poem where every line is 'the end'.",
    "Repeat after me: hello world, hello world, hello world.",
    "Write 'I will not talk in class' a hundred times.",
    "Write the word buffalo as many times as you can.",
    "Continue the pattern: 1 2 1 2 1 2",
    "Continue the pattern: ab ab ab ab",
    "Write a chant for a football team.",
    "Count down from 50 to 1.",
    "List the even numbers up to 200.",
    "Spell the word banana letter by letter, many times.",
    "Write ha ha ha for a long laugh.",
    "Write 'go team go' twenty times.",
)
"""Prompts that make a small model loop when its repetition penalties are off."""


def noised(name: str, kind: str) -> str:
    """``name`` with one kind of surface noise (``NOISE_KINDS``; ``as_is``: none)."""
    if kind == "lower":
        return name.lower()
    if kind == "upper":
        return name.upper()
    if kind == "no_the":
        return name.removeprefix("The ").removeprefix("the ")
    if kind == "no_punct":
        return "".join(ch for ch in name if ch.isalnum() or ch.isspace())
    return name


def noisy(name: str, rng: random.Random) -> str:
    """The name as a careless writer would put it: case, punctuation, no leading 'The'."""
    return noised(name, rng.choice(NOISE_KINDS))


def load_movie_graph(data_dir: Path) -> tuple[KnowledgeGraph, float]:
    """MetaQA's movie graph, with the seconds it took to load."""
    started = time.perf_counter()
    graph = KnowledgeGraph.from_file(
        metaqa_kb_path(data_dir),
        functional_relations=MOVIE_FUNCTIONAL_RELATIONS,
        relation_phrases=MOVIE_RELATION_PHRASES,
    )
    return graph, time.perf_counter() - started


def movie_passages(graph: KnowledgeGraph, movies: Sequence[str]) -> list[Document]:
    """Each movie's triples written out as one short text (as ``ragguard eval metaqa`` does)."""
    return render_movie_passages(
        (movie, relation, obj)
        for movie in movies
        for relation in MOVIE_LABELS
        for obj in graph.objects(movie, relation)
    )


def shuffled_questions(data_dir: Path, rng: random.Random) -> list[MetaQAQuestion]:
    """MetaQA's 1-hop test questions that the graph supports, shuffled by ``rng`` (the source
    groups them by question type)."""
    questions = [q for q in load_metaqa_questions(data_dir) if q.kb_supported]
    rng.shuffle(questions)
    return questions


@dataclass(frozen=True, slots=True)
class GoldTriples:
    """Triples the graph holds, to be written as claims."""

    triples: list[Triple]
    num_from_questions: int
    """The first ``num_from_questions`` are implied by test questions; the rest were drawn."""


def claim_triples(
    questions: Sequence[MetaQAQuestion], graph: KnowledgeGraph, limit: int, rng: random.Random
) -> GoldTriples:
    """Gold triples: those the questions imply (in their order; at most ``max(5 * limit,
    200)``) whose names the graph knows, then, since those name four relations only, triples
    drawn from the graph with ``rng`` until every relation has ``limit`` of them (or all it
    has)."""
    triples: list[Triple] = []
    for q in questions:
        triple = q.implied_triples[0] if q.implied_triples else None
        if triple and graph.resolve(triple[0], fuzzy=False) and graph.resolve(triple[2]):
            triples.append(triple)
        if len(triples) >= max(limit * 5, 200):
            break
    from_questions = len(triples)
    have: dict[str, int] = defaultdict(int)
    for _, relation, _ in triples:
        have[relation] += 1
    edges: dict[str, list[Triple]] = defaultdict(list)
    for s, o, relation in graph.graph.edges(keys=True):
        edges[relation].append((s, relation, o))
    for relation in sorted(edges):
        pool = sorted(edges[relation])
        want = min(limit, len(pool)) - have[relation]
        if want > 0:
            triples.extend(rng.sample(pool, want))
    return GoldTriples(triples, from_questions)


def loops_by_oracle(token_ids: Sequence[int], max_tokens: int) -> bool:
    """Independent label of a degenerate loop: ran to max_tokens, and the second half of the
    tokens compresses more than 4x (a statistic our detector does not use)."""
    if len(token_ids) < max_tokens:
        return False
    tail = np.asarray(token_ids[len(token_ids) // 2 :], dtype=np.int32).tobytes()
    return len(tail) / len(zlib.compress(tail, 9)) > 4.0
