"""Which way a passage's findings point: for a yes/no question, does the evidence say "no"?

A yes/no answer holds no span to look for in the passages ("yes" is in none of them), so the
span signals cannot judge it. What can be read from the passage is its direction: a finding
stated with a negation ("no significant difference", "did not improve", "was not associated",
"similar in both groups") points to "no"; an affirmative one ("significantly reduced", "was
associated with", "higher") to "yes". ``finding_polarity`` counts both kinds of cue; the answer
evidence guard compares it with the answer's verdict (``verdict_evidence``).

The cue lists are general English for reporting a finding, not words learned from a data set;
they read a direction, not a truth, so the signal is weak evidence and weighted as such.
"""

from __future__ import annotations

import re

_NEGATED = re.compile(
    r"\b(?:no|not|nor|neither|none|never|without|failed to|unable to|lack of|absence of|"
    r"non-?significant|insignificant|similar|comparable|unrelated|independent of)\b|n't\b",
    re.IGNORECASE,
)
_AFFIRMED = re.compile(
    r"\b(?:significant(?:ly)?|associated|correlated|predict(?:s|ed|ive|or|ors)?|effective|"
    r"increase[sd]?|decrease[sd]?|reduce[sd]?|improve[sd]?|improvement|"
    r"higher|lower|greater|better|more|less)\b",
    re.IGNORECASE,
)


def finding_polarity(text: str) -> float | None:
    """In [-1, 1]: below 0 the text's findings lean negated ("no"), above 0 affirmed ("yes");
    None when it holds neither kind of cue. Damped by one pseudo-count, so a single cue says
    less than several that agree."""
    negated = len(_NEGATED.findall(text))
    affirmed = len(_AFFIRMED.findall(text))
    if negated + affirmed == 0:
        return None
    return (affirmed - negated) / (affirmed + negated + 1)


def verdict_evidence(verdict: str | None, passage: str) -> float | None:
    """In [-0.5, 0.5]: how far the passage's findings lean toward the answer's yes or no (0.5:
    they point its way; -0.5: the other way). None for any other verdict, or a passage with no
    cue."""
    if verdict not in ("yes", "no"):
        return None
    polarity = finding_polarity(passage)
    if polarity is None:
        return None
    return 0.5 * polarity if verdict == "yes" else -0.5 * polarity
