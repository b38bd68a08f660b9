"""A knowledge graph for fact checking: triples in networkx, names normalised and aliased, entities
linked in text, and a claim (subject, relation, object) judged against the graph
(``guards.claims`` finds the claims an answer makes).

A claim is SUPPORTED when the graph holds that edge, CONTRADICTED when the relation is functional
(one value per subject: a release year, a director) and the graph gives the subject a different
value, and UNKNOWN otherwise: absence from the graph is never treated as falsehood.
"""

from __future__ import annotations

import enum
import itertools
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from difflib import get_close_matches
from pathlib import Path

import networkx as nx

from guards.text import CUE_WORDS, FUNCTION_WORDS, name_tokens, normalize
from guards.triples import declared_functional, read_rows, read_triples

MAX_ENTITY_WORDS = 16
_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)


class ClaimVerdict(enum.StrEnum):
    """What the graph says of a claim."""

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
    written carelessly, maybe an ordinary word; ``guards.claims.extract_claims`` says which."""


@dataclass(frozen=True, slots=True)
class Claim:
    subject: str
    relation: str
    object: str


@dataclass(frozen=True, slots=True)
class ClaimCheck:
    claim: Claim
    verdict: ClaimVerdict
    known_objects: tuple[str, ...] = ()
    """What the graph holds for (subject, relation), to show a reviewer."""


def normalize_name(text: str) -> str:
    """A name's key: ``normalize`` without a leading article ("The Matrix" is "matrix")."""
    return normalize(text, articles="leading")


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
            node = self._by_key.get(normalize_name(canonical))
            if node is not None:
                self._by_key.setdefault(normalize_name(alias), node)
        self.functional_relations = set(functional_relations)
        phrases = {r: _name_phrases(r) for r in self.relations}
        for relation, extra in (relation_phrases or {}).items():
            phrases.setdefault(relation, []).extend(extra)
        self.relation_phrases = {
            r: sorted({normalize_name(p) for p in ps}, key=len, reverse=True)
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
        key = (
            normalize_name(name) or name.casefold()
        )  # names of punctuation only ("$") stay as they are
        node = self._by_key.setdefault(key, name)
        squashed = normalize_name(
            _PUNCT.sub("", name)
        )  # "Kick-Ass 2" written "KickAss 2", "L.A." "LA"
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
        key = normalize_name(name) or name.strip().casefold()
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

    def has_value(self, relation: str, node: str) -> bool:
        """Is ``node`` the object of ``relation`` somewhere in the graph?"""
        return node in self._range.get(relation, ())

    def objects(self, subject: str, relation: str) -> set[str]:
        return self._objects.get((subject, relation), set())

    def link(self, text: str, *, weak: bool = False) -> list[Mention]:
        """Entities mentioned in ``text``: longest normalised n-gram matches, left to right.

        A one-word match written in lower case ("made", "up") is taken for an ordinary word,
        not a title, unless the whole text is in lower case; ``weak=True`` lists such words
        too, marked ``weak``. Nor does a name begin in lower case and go on in capitals:
        "starred in Time Changer" holds the film "Time Changer", not "In Time"."""
        pairs = name_tokens(text)
        tokens, words = [t for t, _ in pairs], [w for _, w in pairs]
        mixed_case = text != text.casefold()
        mentions: list[Mention] = []
        i = 0
        while i < len(words):
            for size in range(min(MAX_ENTITY_WORDS, len(words) - i), 0, -1):
                node = self._by_key.get(" ".join(words[i : i + size]))
                if node is None:
                    continue
                if mixed_case and tokens[i].isalpha() and tokens[i].islower():
                    if size == 1 and weak and words[i] not in CUE_WORDS:
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
            return ClaimCheck(claim, ClaimVerdict.SUPPORTED, tuple(sorted(known)))
        if claim.relation in self.functional_relations and known:
            return ClaimCheck(claim, ClaimVerdict.CONTRADICTED, tuple(sorted(known)))
        return ClaimCheck(claim, ClaimVerdict.UNKNOWN, tuple(sorted(known)))


def _name_phrases(relation: str) -> list[str]:
    """Phrases a relation's name gives: "has_temperature" -> "has temperature", "temperature"."""
    spoken = relation.replace("_", " ")
    phrases = [spoken]
    for prefix in ("has ", "is ", "in "):
        rest = spoken[len(prefix) :]
        if spoken.startswith(prefix) and rest and rest not in FUNCTION_WORDS:
            phrases.append(rest)  # "is_a" gives no bare "a": articles are not relation cues
    return phrases
