"""Text helpers shared by the guards (and by ``rag``'s citation attribution)."""

from __future__ import annotations

import re
import unicodedata
from typing import Literal

_MARKER = re.compile(r"\[(\d{1,3})\]")
_WORD = re.compile(r"\w+(?:[-']\w+)*", re.UNICODE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])")
_STOPWORDS = frozenset(
    (
        "a an the of to in on for and or but is are was were be been being it its this "
        "that these those as at by with from into than then so such can could would "
        "should will may might do does did not no yes if what which who whom whose when "
        "where why how i you he she they we them their there here also only just about "
        "over under more most less very "
    ).split()
)


_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)
_SPACE = re.compile(r"\s+")
_APOSTROPHE = re.compile(r"(?<=\w)['’](?=\w)")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_LEADING_ARTICLE = re.compile(r"^(?:the|a|an) (?=.)")


def normalize(text: str, *, articles: Literal["all", "leading", "keep"] = "all") -> str:
    """The form texts are compared in: case-folded, accent- and punctuation-free, single-spaced,
    and without articles: ``all`` of them (answers compared with each other and with passages;
    an apostrophe is a word break, so "Nolan" is found in "Nolan's film"), only a ``leading``
    one (names: "The Lord of the Rings" is "lord of the rings"), or none (``keep``: single
    words). Names drop an apostrophe inside a word: "I'll" and "Ill" are one title."""
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if not unicodedata.combining(c)).casefold()
    if articles != "all":
        text = _APOSTROPHE.sub("", text)
    text = _SPACE.sub(" ", _PUNCT.sub(" ", text)).strip()
    if articles == "all":
        return " ".join(_ARTICLES.sub(" ", text).split())
    if articles == "leading":
        return _LEADING_ARTICLE.sub("", text, count=1)
    return text


_TOKEN = re.compile(r"\w+(?:['’]\w+)*|[^\w\s]", re.UNICODE)
FUNCTION_WORDS = frozenset({"a", "an", "the", "of", "to", "in", "on", "for", "by", "with"})
CUE_WORDS = FUNCTION_WORDS | {"about"}
"""A relation phrase made of these only ("in", "about") names its relation only for one of the
relation's values: "in French" is a language, "released in 1999" is not."""


def name_tokens(text: str) -> list[tuple[str, str]]:
    """The tokens of ``text`` that hold a word, each as written and normalised (articles
    kept): the unit of entity linking."""
    pairs = ((t, normalize(t, articles="keep")) for t in _TOKEN.findall(text))
    return [(token, word) for token, word in pairs if word]


def name_words(text: str) -> list[str]:
    """The normalised words of ``text`` (articles kept), as ``name_tokens`` gives them."""
    return [word for _, word in name_tokens(text)]


_NEGATION = re.compile(r"\b(not|no|never|none|nor|cannot|without)\b|n't\b", re.IGNORECASE)


def is_negated(text: str) -> bool:
    """Does the sentence contain a negation?"""
    return bool(_NEGATION.search(text))


def content_words(text: str) -> set[str]:
    """Lower-cased words minus stop words."""
    return {w for w in _WORD.findall(text.casefold()) if w not in _STOPWORDS}


_TERM = re.compile(r"\b(?:[A-ZÀ-Ý][\w'-]*|\d[\d.,:/-]*)", re.UNICODE)


def key_terms(text: str) -> set[str]:
    """Names and numbers: capitalised words and numerals, lower-cased, stop words dropped.
    An answer's key terms that no source mentions are what a hallucination usually adds."""
    return {
        t.casefold().rstrip(".,:/-") for t in _TERM.findall(text) if t.casefold() not in _STOPWORDS
    }


def quoted_share(text: str, source: str, span: int = 2) -> float:
    """Share of the words of ``text`` inside a run of ``span`` consecutive words that also
    occurs in ``source`` (all of a one-word text when the word occurs there)."""
    words = [w.casefold() for w in _WORD.findall(text)]
    if not words:
        return 0.0
    n = min(span, len(words))
    haystack = " " + " ".join(w.casefold() for w in _WORD.findall(source)) + " "
    covered = [False] * len(words)
    for i in range(len(words) - n + 1):
        if f" {' '.join(words[i : i + n])} " in haystack:
            covered[i : i + n] = [True] * n
    return sum(covered) / len(words)


def sentences(text: str) -> list[str]:
    """Sentences of ``text`` (split after . ! ? and their CJK forms), empty ones dropped."""
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def cited_numbers(text: str) -> list[int]:
    """``[n]`` marker numbers in order of first appearance."""
    return list(dict.fromkeys(int(m) for m in _MARKER.findall(text)))


def strip_markers(text: str) -> str:
    return _MARKER.sub("", text)


def overlap(words: set[str], reference: set[str]) -> float:
    """Share of ``words`` found in ``reference`` (0 for no words)."""
    return len(words & reference) / len(words) if words else 0.0
