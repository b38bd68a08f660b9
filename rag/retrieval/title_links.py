"""Links between documents through their titles: a passage that names another document's title
points to that document, as a hyperlink would.

Hybrid search follows the links of its best passages. This is the second hop of a multi-hop
question: the question names only the first entity ("the spouse of the performer of X"), the
passage about X names the performer, and the performer's own document shares no word with the
question, so neither dense nor BM25 search ranks it. Documents without a ``title`` take no part.

Titles are matched as whole words, case and all (``Paris`` does not link from ``Parisian`` or
``paris``), the longest title at each position first; titles shorter than ``MIN_TITLE_CHARS``
are too ambiguous to link.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

MIN_TITLE_CHARS = 4
MAX_TITLE_WORDS = 12
"""Longer titles are not linked (a sentence-long title is not a name a passage repeats)."""
_WORD = re.compile(r"\w+")

TitleRows = Callable[[], Iterable[tuple[str, int]]]
"""(title, row id of the document's first chunk) for every titled document."""


def _words(text: str) -> tuple[str, ...]:
    return tuple(_WORD.findall(text))


class TitleLinks:
    """Which documents a passage names, rebuilt from the index's titles when its generation
    changes (a write or a delete)."""

    def __init__(self, titles: TitleRows):
        self._titles = titles
        self._generation: int | None = None
        self._targets: dict[tuple[str, ...], list[int]] = {}
        self._longest = 0
        self._first_words: set[str] = set()

    def _ensure(self, generation: int) -> None:
        if generation == self._generation:
            return
        targets: dict[tuple[str, ...], list[int]] = {}
        for title, row in self._titles():
            words = _words(title)
            if len(title.strip()) >= MIN_TITLE_CHARS and 0 < len(words) <= MAX_TITLE_WORDS:
                targets.setdefault(words, []).append(row)
        self._targets = targets
        self._longest = max(map(len, targets), default=0)
        self._first_words = {words[0] for words in targets}
        self._generation = generation

    def follow(self, passages: Sequence[tuple[str | None, str]], generation: int) -> list[int]:
        """The first-chunk row ids of the documents that ``passages`` ((own title, text) pairs,
        best first) name, in reading order; a passage's own document is not its link."""
        self._ensure(generation)
        linked: list[int] = []
        seen: set[int] = set()
        for own, text in passages:
            own_words = _words(own) if own else None
            words = _words(text)
            for start in range(len(words)):
                if words[start] not in self._first_words:
                    continue
                for n in range(min(self._longest, len(words) - start), 0, -1):
                    key = words[start : start + n]
                    rows = self._targets.get(key)
                    if rows is None:
                        continue
                    if key != own_words:
                        linked.extend(r for r in rows if r not in seen)
                        seen.update(rows)
                    break  # the longest title here; a shorter one inside it is not a link
        return linked
