"""Knowledge-graph fact checking: link entities, extract claims, judge them against the graph.

A claim (subject, relation, object) is SUPPORTED when the graph holds that edge, CONTRADICTED
when the relation is functional (one value per subject: a release year, a director) and the graph
gives the subject a different value, and UNKNOWN otherwise: absence from the graph is never
treated as falsehood.
"""

from __future__ import annotations

import enum
import itertools
import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from difflib import get_close_matches
from pathlib import Path

import networkx as nx

from guards.triples import declared_functional, read_rows, read_triples

_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)
_SPACE = re.compile(r"\s+")
_APOSTROPHE = re.compile(r"(?<=\w)['’](?=\w)")
"""Inside a word an apostrophe is dropped, not split on: "I'll" and "Ill" are one name."""
_TOKEN = re.compile(r"\w+(?:['’]\w+)*|[^\w\s]", re.UNICODE)
MAX_ENTITY_WORDS = 16
_FUNCTION_WORDS = frozenset({"a", "an", "the", "of", "to", "in", "on", "for", "by", "with"})
_CUE_WORDS = _FUNCTION_WORDS | {"about"}
"""A relation phrase made of these only ("in", "about") names its relation only for one of the
relation's values: "in French" is a language, "released in 1999" is not."""


def normalize(text: str) -> str:
    """Case-folded, accent- and punctuation-free, single-spaced, without a leading article."""
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if not unicodedata.combining(c)).casefold()
    text = _SPACE.sub(" ", _PUNCT.sub(" ", _APOSTROPHE.sub("", text))).strip()
    for article in ("the ", "a ", "an "):
        if text.startswith(article) and len(text) > len(article):
            return text[len(article) :]
    return text


class Verdict(enum.StrEnum):
    SUPPORTED = "supported"
    CONTRADICTED = "contradicted"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Mention:
    """An entity found in a text: the graph node and where it was found (word offsets)."""

    node: str
    start: int
    end: int
    weak: bool = False
    """A lower-case one-word match in mixed-case text ("shaft", "good"): maybe a title or value
    written carelessly, maybe an ordinary word; ``extract_claims`` says which."""


@dataclass(frozen=True, slots=True)
class Claim:
    subject: str
    relation: str
    object: str


@dataclass(frozen=True, slots=True)
class ClaimCheck:
    claim: Claim
    verdict: Verdict
    known_objects: tuple[str, ...] = ()
    """What the graph holds for (subject, relation), to show a reviewer."""


MOVIE_RELATION_PHRASES: dict[str, list[str]] = {
    "directed_by": ["directed", "director", "directors", "direct", "directs"],
    "written_by": ["written", "writer", "writers", "wrote", "screenplay", "script"],
    "starred_actors": [
        "starred",
        "starring",
        "stars",
        "star",
        "actor",
        "actors",
        "actress",
        "cast",
        "acted",
        "appeared",
        "appears",
    ],
    "release_year": ["released", "release", "came out", "premiered"],
    "in_language": ["language", "languages", "spoken", "in"],
    "has_genre": ["genre", "genres"],
    "has_tags": ["tag", "tags", "tagged", "about", "describe", "describes", "described"],
    "has_imdb_rating": ["rating", "rated"],
    "has_imdb_votes": ["votes"],
}
"""Surface phrases of the MetaQA / WikiMovies relations (other graphs: the relation's own name)."""
MOVIE_FUNCTIONAL_RELATIONS = ("release_year", "directed_by", "has_imdb_rating", "has_imdb_votes")
"""MetaQA relations with one value per movie (over 90% of its movies have exactly one; a title
shared by several films is what holds the rest)."""


class KnowledgeGraph:
    """Triples in a networkx multigraph, with normalised names and aliases for linking."""

    def __init__(
        self,
        triples: Iterable[tuple[str, str, str]] = (),
        *,
        aliases: Mapping[str, str] | None = None,
        functional_relations: Iterable[str] = (),
        relation_phrases: Mapping[str, Iterable[str]] | None = None,
    ):
        self.graph: nx.MultiDiGraph = nx.MultiDiGraph()
        self._by_key: dict[str, str] = {}
        self._objects: dict[tuple[str, str], set[str]] = defaultdict(set)
        self._range: dict[str, set[str]] = defaultdict(set)
        """Every object each relation has somewhere in the graph."""
        for subject, relation, obj in triples:
            self.add(subject, relation, obj)
        for alias, canonical in (aliases or {}).items():
            node = self._by_key.get(normalize(canonical))
            if node is not None:
                self._by_key.setdefault(normalize(alias), node)
        self.functional_relations = set(functional_relations)
        phrases = {r: _name_phrases(r) for r in self.relations}
        for relation, extra in (relation_phrases or {}).items():
            phrases.setdefault(relation, []).extend(extra)
        self.relation_phrases = {
            r: sorted({normalize(p) for p in ps}, key=len, reverse=True)
            for r, ps in phrases.items()
        }
        self._fuzzy_index: dict[str, list[str]] | None = None

    # ------------------------------------------------------------- building
    def add(self, subject: str, relation: str, obj: str) -> None:
        s, o = self._node(subject), self._node(obj)
        if o not in self._objects[(s, relation)]:
            self.graph.add_edge(s, o, key=relation, relation=relation)
            self._objects[(s, relation)].add(o)
            self._range[relation].add(o)

    def _node(self, name: str) -> str:
        name = name.strip()
        if not name:
            raise ValueError("an entity name is empty")
        key = normalize(name) or name.casefold()  # names of punctuation only ("$") stay as they are
        node = self._by_key.setdefault(key, name)
        squashed = normalize(_PUNCT.sub("", name))  # "Kick-Ass 2" written "KickAss 2", "L.A." "LA"
        if squashed and squashed != key:
            self._by_key.setdefault(squashed, node)
        if node not in self.graph:
            self.graph.add_node(node)
        return node

    @classmethod
    def from_file(
        cls,
        path: str | Path,
        *,
        aliases_path: str | Path | None = None,
        functional_relations: Iterable[str] = (),
        relation_phrases: Mapping[str, Iterable[str]] | None = None,
    ) -> KnowledgeGraph:
        """Load ``subject|relation|object`` lines (.txt), tab-separated (.tsv) or JSONL
        (``{"subject", "relation", "object"}``); ``#`` lines are comments, and a comment
        ``# functional: rel_a, rel_b`` declares relations with one value per subject."""
        aliases: dict[str, str] | None = None
        if aliases_path:
            aliases = {row[0]: row[1] for row in read_rows(Path(aliases_path), 2)}
        return cls(
            read_triples(Path(path)),
            aliases=aliases,
            functional_relations=set(functional_relations) | declared_functional(Path(path)),
            relation_phrases=relation_phrases,
        )

    # --------------------------------------------------------------- lookup
    @property
    def relations(self) -> set[str]:
        return {relation for _, relation in self._objects}

    def __len__(self) -> int:
        return int(self.graph.number_of_edges())

    def resolve(self, name: str, *, fuzzy: bool = True, cutoff: float = 0.9) -> str | None:
        """The node a name refers to: exact, normalised or alias match, then fuzzy."""
        if name in self.graph:
            return name
        key = normalize(name) or name.strip().casefold()
        if key in self._by_key:
            return self._by_key[key]
        if not fuzzy or not key:
            return None
        candidates = self._fuzzy_candidates(key)
        match = get_close_matches(key, candidates, n=1, cutoff=cutoff)
        return self._by_key[match[0]] if match else None

    def _fuzzy_candidates(self, key: str) -> list[str]:
        if self._fuzzy_index is None:
            index: dict[str, list[str]] = defaultdict(list)
            for k in self._by_key:
                index[k[:2]].append(k)
            self._fuzzy_index = index
        return self._fuzzy_index.get(key[:2], [])

    def values(self, relation: str) -> set[str]:
        """Every object ``relation`` has somewhere in the graph (its range)."""
        return set(self._range.get(relation, ()))

    def objects(self, subject: str, relation: str) -> set[str]:
        return self._objects.get((subject, relation), set())

    def link(self, text: str, *, weak: bool = False) -> list[Mention]:
        """Entities mentioned in ``text``: longest normalised n-gram matches, left to right.

        A one-word match written in lower case ("made", "up") is taken for an ordinary word,
        not a title, unless the whole text is in lower case; ``weak=True`` lists such words
        too, marked ``weak``. Nor does a name begin in lower case and go on in capitals:
        "starred in Time Changer" holds the film "Time Changer", not "In Time"."""
        tokens = [t for t in _TOKEN.findall(text) if _word(t)]
        words = [_word(t) for t in tokens]
        mixed_case = text != text.casefold()
        mentions: list[Mention] = []
        i = 0
        while i < len(words):
            for size in range(min(MAX_ENTITY_WORDS, len(words) - i), 0, -1):
                node = self._by_key.get(" ".join(words[i : i + size]))
                if node is None:
                    continue
                if mixed_case and tokens[i].isalpha() and tokens[i].islower():
                    if size == 1 and weak and words[i] not in _CUE_WORDS:
                        mentions.append(Mention(node, i, i + 1, weak=True))
                    if size == 1 or (
                        any(not t.islower() for t in tokens[i + 1 : i + size] if t.isalpha())
                        and not next((c for c in node if c.isalpha()), "").islower()
                    ):
                        continue
                mentions.append(Mention(node, i, i + size))
                i += size
                break
            else:
                i += 1
        return mentions

    def paths(
        self, source: str, target: str, max_hops: int = 3
    ) -> list[list[tuple[str, str, str]]]:
        """Relation paths of up to ``max_hops`` edges between two nodes (either direction)."""
        undirected = self.graph.to_undirected(as_view=True)
        found = []
        for nodes in nx.all_simple_paths(undirected, source, target, cutoff=max_hops):
            hops = []
            for a, b in itertools.pairwise(nodes):
                if self.graph.has_edge(a, b):
                    hops.append((a, next(iter(self.graph.get_edge_data(a, b))), b))
                else:
                    hops.append((b, next(iter(self.graph.get_edge_data(b, a))), a))
            found.append(hops)
        return found

    # --------------------------------------------------------------- claims
    def check(self, claim: Claim) -> ClaimCheck:
        known = self.objects(claim.subject, claim.relation)
        if claim.object in known:
            return ClaimCheck(claim, Verdict.SUPPORTED, tuple(sorted(known)))
        if claim.relation in self.functional_relations and known:
            return ClaimCheck(claim, Verdict.CONTRADICTED, tuple(sorted(known)))
        return ClaimCheck(claim, Verdict.UNKNOWN, tuple(sorted(known)))

    def extract_claims(self, answer: str, question: str = "") -> list[Claim]:
        """Claims the answer makes. Each entity of the answer is the object of the relation
        phrase nearest to it in the answer (else of the relations the question names); its
        subjects are the other entities of the question and answer that have that relation in
        the graph (which also fixes the direction).

        A weak mention (a lower-case word in mixed-case text) may be an object: values such as
        tags ("tagged hockey") or ratings ("rated good") are written so, and the relation phrase
        and its range vouch for it. As a subject it is the last resort, and only for a claim
        the graph holds: "shaft starred Richard Roundtree" is the film, "it was made by ..."
        is no claim about the film "Made"."""
        phrases = self._phrase_positions(_words(answer))
        on_phrase = {i for _, start, end, _ in phrases for i in range(start, end)}
        lower = answer == answer.casefold()  # then "has the tag x" is no film "Tag"
        answer_mentions = [
            m
            for m in self.link(answer, weak=True)
            if not ((m.weak or lower) and on_phrase.issuperset(range(m.start, m.end)))
        ]
        in_names = {i for m in answer_mentions if not m.weak for i in range(m.start, m.end)}
        # The words of a title are no relation cue: "A Star Is Born", "All About Eve".
        in_answer = [p for p in phrases if p[1] not in in_names]
        if not answer_mentions:
            return []
        question_entities = list(dict.fromkeys(m.node for m in self.link(question)))
        in_question = {r for r, _, _, _ in self._phrase_positions(_words(question))}
        claims: list[Claim] = []
        for mention in answer_mentions:
            relations = self._nearest_relations(mention, in_answer) or in_question
            for relation in relations:
                if mention.node not in self._range[relation]:
                    continue  # not a possible value of this relation (a preset is no temperature)
                for subject in self._subjects(
                    mention, relation, answer_mentions, question_entities
                ):
                    claims.append(Claim(subject, relation, mention.node))
        return list(dict.fromkeys(claims))

    def _subjects(
        self,
        obj: Mention,
        relation: str,
        answer_mentions: list[Mention],
        question_entities: list[str],
    ) -> list[str]:
        """Who the answer says has ``obj`` as its ``relation``: the nearest entity of the answer
        that has that relation in the graph, else the question's entities that have it, else
        the nearest weak mention of the answer for which the graph holds the claim."""
        others = [m for m in answer_mentions if m.node != obj.node]
        in_answer = [m for m in others if not m.weak and self.objects(m.node, relation)]
        if not in_answer:
            asked = [n for n in question_entities if n != obj.node and self.objects(n, relation)]
            if asked:
                return asked
            in_answer = [m for m in others if m.weak and obj.node in self.objects(m.node, relation)]
            if not in_answer:
                return []
        before = [m for m in in_answer if m.start < obj.start]
        pool = before or in_answer  # "X ... uses a temperature of 0.9": the subject comes first
        nearest = min(abs(m.start - obj.start) for m in pool)
        return list(dict.fromkeys(m.node for m in pool if abs(m.start - obj.start) == nearest))

    def _phrase_positions(self, words: list[str]) -> list[tuple[str, int, int, bool]]:
        """(relation, start, end word offsets, made of cue words only) of every relation
        phrase in ``words``."""
        text = " " + " ".join(words) + " "
        found = []
        for relation, phrases in self.relation_phrases.items():
            for phrase in phrases:
                cue = set(phrase.split()) <= _CUE_WORDS
                start = text.find(f" {phrase} ")
                while start != -1:
                    first = text.count(" ", 0, start + 1) - 1
                    found.append((relation, first, first + phrase.count(" ") + 1, cue))
                    start = text.find(f" {phrase} ", start + 1)
        return found

    def _nearest_relations(
        self, mention: Mention, positions: list[tuple[str, int, int, bool]]
    ) -> set[str]:
        """Relations whose phrase is closest to the mention, preferring phrases before it; a
        phrase of cue words only ("in") counts only for a value of its relation."""
        outside = [
            (r, p)
            for r, p, _, cue in positions
            if not mention.start <= p < mention.end and (not cue or mention.node in self._range[r])
        ]
        if not outside:
            return set()
        before = [(r, p) for r, p in outside if p < mention.start]
        pool = before or outside
        best = min(abs(mention.start - p) for _, p in pool)
        return {r for r, p in pool if abs(mention.start - p) == best}

    def check_answer(self, answer: str, question: str = "") -> list[ClaimCheck]:
        return [self.check(c) for c in self.extract_claims(answer, question)]


def _name_phrases(relation: str) -> list[str]:
    """Phrases a relation's name gives: "has_temperature" -> "has temperature", "temperature"."""
    spoken = relation.replace("_", " ")
    phrases = [spoken]
    for prefix in ("has ", "is ", "in "):
        rest = spoken[len(prefix) :]
        if spoken.startswith(prefix) and rest and rest not in _FUNCTION_WORDS:
            phrases.append(rest)  # "is_a" gives no bare "a": articles are not relation cues
    return phrases


def _word(token: str) -> str:
    folded = unicodedata.normalize("NFKD", token)
    folded = "".join(c for c in folded if not unicodedata.combining(c)).casefold()
    return _SPACE.sub(" ", _PUNCT.sub(" ", _APOSTROPHE.sub("", folded))).strip()


def _words(text: str) -> list[str]:
    """Normalised words, the unit of linking and of relation phrases (articles kept)."""
    return [w for w in (_word(t) for t in _TOKEN.findall(text)) if w]
