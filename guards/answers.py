"""What an answer says and what a question asks for: the answer's core span and both their kinds.

Small models wrap a one-word answer in sentences ("1. The answer is: Paris [2]."); the guards
compare the *core* (``answer_core``) with the passages and with the other samples. A question's
expected kind (yes/no, a number or date, a name) is read from its first words.
"""

from __future__ import annotations

import enum
import re

from guards.text import content_words, key_terms, strip_markers

_LEADS = re.compile(
    r"^\s*(?:\d+[.)]\s*)?(?:(?:the\s+)?(?:final\s+|short\s+|correct\s+)?answer\s*(?:is|:)\s*:?"
    r"|passages?\s*:"  # an echo of the prompt's label: "Passage: [5] The Hukilau Song is..."
    r"|based on (?:the )?(?:passages?|context|information)[^,:]*[,:]"
    r"|according to (?:the )?(?:passages?|context)[^,:]*[,:])\s*",
    re.IGNORECASE,
)
_YES_NO_START = re.compile(
    r"^(is|are|was|were|do|does|did|can|could|has|have|had|will|would|should|shall|may|might)\b",
    re.IGNORECASE,
)
_NUMBER_Q = re.compile(
    r"\b(how (many|much|old|long)|what year|which year|in what year|when)\b", re.IGNORECASE
)
_PERSON_Q = re.compile(
    r"^\s*(who|whom|whose)\b|\b(which|what) (person|actor|director|writer)\b", re.IGNORECASE
)
_NUMBER = re.compile(r"\d")
_VERDICT = re.compile(r"^\W*(yes|no|maybe)\b", re.IGNORECASE)
_DECLINE = re.compile(
    r"\b(i (?:do not|don't|dont) know|cannot answer|can't answer|not (?:mentioned|provided) in)\b",
    re.IGNORECASE,
)
_NO_ANSWER_HINT = re.compile(
    r"\b(not (?:mentioned|provided|stated)|no information|cannot be determined|"
    r"does not (?:say|mention|provide))\b",
    re.IGNORECASE,
)


class QuestionKind(enum.StrEnum):
    YES_NO = "yes_no"
    NUMBER = "number"
    PERSON = "person"
    OTHER = "other"


def answer_core(answer: str) -> str:
    """The answer's first statement without list numbers, lead-ins ("The answer is:") and
    citation markers: the span to look for in the passages."""
    text = strip_markers(answer).strip()
    for _ in range(3):  # lead-ins stack: "1. Based on the passages, the answer is: X"
        stripped = _LEADS.sub("", text, count=1).strip()
        if stripped == text:
            break
        text = stripped
    first = re.split(r"(?<=[.!?])\s+|\n", text, maxsplit=1)[0]
    return first.strip().rstrip(".").strip()


def question_kind(question: str) -> QuestionKind:
    """What kind of answer the question asks for, from its first words."""
    q = question.strip()
    if _YES_NO_START.match(q) or q.rstrip("?. ").casefold().endswith("yes, no or maybe"):
        return QuestionKind.YES_NO
    if _NUMBER_Q.search(q):
        return QuestionKind.NUMBER
    if _PERSON_Q.search(q):
        return QuestionKind.PERSON
    return QuestionKind.OTHER


_OPTIONS = re.compile(r"^\W*(yes|no|maybe)\W+(or\s+)?(yes|no|maybe)\b", re.IGNORECASE)


def verdict(answer: str) -> str | None:
    """The yes / no / maybe an answer opens with (after any lead-in), if any. An answer that
    opens by listing the options ("Yes, no or maybe.") gives none."""
    for text in (answer_core(answer), answer.strip()):
        if _OPTIONS.match(text):
            return None
        if match := _VERDICT.match(text):
            return match.group(1).casefold()
    return None


def is_declined(answer: str) -> bool:
    """Does the answer say it does not know (or say nothing)? The pipeline then returns its
    "I don't know." with no citations."""
    return not answer.strip() or bool(_DECLINE.search(answer))


def states_no_answer(answer: str) -> bool:
    """Does the answer decline, or say the passages lack what was asked? Such an answer has no
    span for the guards to look for, though it may go on to say something else."""
    return is_declined(answer) or bool(_NO_ANSWER_HINT.search(answer))


def kind_matches(kind: QuestionKind, answer: str, question: str) -> bool | None:
    """Does the answer give what the question asks for? None when the kind sets no test."""
    core = answer_core(answer)
    if kind is QuestionKind.YES_NO:
        return verdict(answer) is not None
    if kind is QuestionKind.NUMBER:
        return bool(_NUMBER.search(core))
    if kind is QuestionKind.PERSON:
        return bool(key_terms(core) - key_terms(question) - content_words(question))
    return None


def new_words(answer: str, question: str) -> set[str]:
    """Content words of the answer's core that the question does not already contain: an answer
    with none only restates the question."""
    return content_words(answer_core(answer)) - content_words(question)
