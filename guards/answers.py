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
    CHOICE = "choice"  # "Who is older, Sid Haig or Vic Darchinyan?"
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


_OR = re.compile(r"\s+or\s+", re.IGNORECASE)
_VERDICT_WORDS = frozenset({"yes", "no", "maybe"})
_MAX_OPTION_WORDS = 8


def choice_options(question: str) -> tuple[str, str] | None:
    """The two options a question offers ("..., A or B?"), or None. The second option is what
    follows the last "or"; the first is what follows the last comma or colon before it, or
    else the run of capitalised words just before it ("formed first The Exies or Circus
    Diablo?"). "Yes, no or maybe" offers no choice of answer."""
    q = question.strip().rstrip("?.! ")
    parts = _OR.split(q)
    if len(parts) < 2:
        return None
    before, second = " or ".join(parts[:-1]), parts[-1].strip()
    lead = _capitalised_run(second.split(), from_end=False)
    if lead and len(lead) < len(second.split()):  # "Was Tom or Jerry born first?"
        second = " ".join(lead)
    if ("," in before or ":" in before) and len(re.split(r"[,:]", before)[-1].split()) > 0:
        first = re.split(r"[,:]", before)[-1].strip()
    else:
        words = before.split()
        run = _capitalised_run(words, from_end=True)
        if len(run) == len(words) and len(run) > 1:
            run = run[1:]  # the question's first word is capitalised for being first
        first = " ".join(run)
    options = (first, second)
    if any(not content_words(o) or len(o.split()) > _MAX_OPTION_WORDS for o in options):
        return None
    if {w.casefold() for o in options for w in re.findall(r"\w+", o)} <= _VERDICT_WORDS:
        return None
    return options


_NAME_GLUE = frozenset({"of", "the", "and", "de"})


def _capitalised_run(words: list[str], *, from_end: bool) -> list[str]:
    """The run of capitalised words (or numbers, with "of"/"the" inside names) at the end (or
    the start) of ``words``."""
    ordered = list(reversed(words)) if from_end else words
    run: list[str] = []
    for word in ordered:
        if not (word[:1].isupper() or word[:1].isdigit()) and word.casefold() not in _NAME_GLUE:
            break
        run.append(word)
    if from_end:
        run.reverse()
    while run and run[0].casefold() in _NAME_GLUE - {"the"}:
        run.pop(0)
    while run and run[-1].casefold() in _NAME_GLUE:
        run.pop()
    return run


def question_kind(question: str) -> QuestionKind:
    """What kind of answer the question asks for, from its first words (or the two options it
    offers)."""
    q = question.strip()
    if choice_options(q) is not None:
        return QuestionKind.CHOICE
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
    if kind is QuestionKind.CHOICE:  # names one of the two options
        options = choice_options(question)
        assert options is not None
        said = content_words(core)
        return any(said & (content_words(o) - content_words_shared(options)) for o in options)
    if kind is QuestionKind.NUMBER:
        return bool(_NUMBER.search(core))
    if kind is QuestionKind.PERSON:
        return bool(key_terms(core) - key_terms(question) - content_words(question))
    return None


def content_words_shared(options: tuple[str, str]) -> set[str]:
    """Content words both options have ("the 1932 outbreak or the 2012 outbreak"): they pick
    neither."""
    return content_words(options[0]) & content_words(options[1])


def new_words(answer: str, question: str) -> set[str]:
    """Content words of the answer's core that the question does not already contain: an answer
    with none only restates the question."""
    return content_words(answer_core(answer)) - content_words(question)
