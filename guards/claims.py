"""Claims an answer makes about a knowledge graph's entities, each judged against the graph.

The answer's entities are linked in the graph (``KnowledgeGraph.link``); each becomes the object
of the relation phrase nearest to it, with the entities that have that relation as its subjects.
``KnowledgeGraph.check`` judges a claim: SUPPORTED, CONTRADICTED or UNKNOWN (``guards.kg``).
"""

from __future__ import annotations

from guards.kg import Claim, ClaimCheck, KnowledgeGraph, Mention
from guards.text import CUE_WORDS, name_words


def extract_claims(graph: KnowledgeGraph, answer: str, question: str = "") -> list[Claim]:
    """Claims the answer makes. Each entity of the answer is the object of the relation
    phrase nearest to it in the answer (else of the relations the question names); its
    subjects are the other entities of the question and answer that have that relation in
    the graph (which also fixes the direction).

    A weak mention (a lower-case word in mixed-case text) may be an object: values such as
    tags ("tagged hockey") or ratings ("rated good") are written so, and the relation phrase
    and its range vouch for it. As a subject it is the last resort, and only for a claim
    the graph holds: "shaft starred Richard Roundtree" is the film, "it was made by ..."
    is no claim about the film "Made"."""
    phrases = _phrase_positions(graph, name_words(answer))
    on_phrase = {i for _, start, end, _ in phrases for i in range(start, end)}
    lower = answer == answer.casefold()  # then "has the tag x" is no film "Tag"
    answer_mentions = [
        m
        for m in graph.link(answer, weak=True)
        if not ((m.weak or lower) and on_phrase.issuperset(range(m.start, m.end)))
    ]
    in_names = {i for m in answer_mentions if not m.weak for i in range(m.start, m.end)}
    # The words of a title are no relation cue: "A Star Is Born", "All About Eve".
    in_answer = [p for p in phrases if p[1] not in in_names]
    if not answer_mentions:
        return []
    question_entities = list(dict.fromkeys(m.node for m in graph.link(question)))
    in_question = {r for r, _, _, _ in _phrase_positions(graph, name_words(question))}
    claims: list[Claim] = []
    for mention in answer_mentions:
        relations = _nearest_relations(graph, mention, in_answer) or in_question
        for relation in relations:
            if not graph.has_value(relation, mention.node):
                continue  # not a possible value of this relation (a preset is no temperature)
            for subject in _subjects(graph, mention, relation, answer_mentions, question_entities):
                claims.append(Claim(subject, relation, mention.node))
    return list(dict.fromkeys(claims))


def _subjects(
    graph: KnowledgeGraph,
    obj: Mention,
    relation: str,
    answer_mentions: list[Mention],
    question_entities: list[str],
) -> list[str]:
    """Who the answer says has ``obj`` as its ``relation``: the nearest entity of the answer
    that has that relation in the graph, else the question's entities that have it, else
    the nearest weak mention of the answer for which the graph holds the claim."""
    others = [m for m in answer_mentions if m.node != obj.node]
    in_answer = [m for m in others if not m.weak and graph.objects(m.node, relation)]
    if not in_answer:
        asked = [n for n in question_entities if n != obj.node and graph.objects(n, relation)]
        if asked:
            return asked
        in_answer = [m for m in others if m.weak and obj.node in graph.objects(m.node, relation)]
        if not in_answer:
            return []
    before = [m for m in in_answer if m.start < obj.start]
    pool = before or in_answer  # "X ... uses a temperature of 0.9": the subject comes first
    nearest = min(abs(m.start - obj.start) for m in pool)
    return list(dict.fromkeys(m.node for m in pool if abs(m.start - obj.start) == nearest))


def _phrase_positions(graph: KnowledgeGraph, words: list[str]) -> list[tuple[str, int, int, bool]]:
    """(relation, start, end word offsets, made of cue words only) of every relation
    phrase in ``words``."""
    text = " " + " ".join(words) + " "
    found = []
    for relation, phrases in graph.relation_phrases.items():
        for phrase in phrases:
            cue = set(phrase.split()) <= CUE_WORDS
            start = text.find(f" {phrase} ")
            while start != -1:
                first = text.count(" ", 0, start + 1) - 1
                found.append((relation, first, first + phrase.count(" ") + 1, cue))
                start = text.find(f" {phrase} ", start + 1)
    return found


def _nearest_relations(
    graph: KnowledgeGraph, mention: Mention, positions: list[tuple[str, int, int, bool]]
) -> set[str]:
    """Relations whose phrase is closest to the mention, preferring phrases before it; a
    phrase of cue words only ("in") counts only for a value of its relation."""
    outside = [
        (r, p)
        for r, p, _, cue in positions
        if not mention.start <= p < mention.end and (not cue or graph.has_value(r, mention.node))
    ]
    if not outside:
        return set()
    before = [(r, p) for r, p in outside if p < mention.start]
    pool = before or outside
    best = min(abs(mention.start - p) for _, p in pool)
    return {r for r, p in pool if abs(mention.start - p) == best}


def check_answer(graph: KnowledgeGraph, answer: str, question: str = "") -> list[ClaimCheck]:
    """The answer's claims, each judged against the graph."""
    return [graph.check(c) for c in extract_claims(graph, answer, question)]
