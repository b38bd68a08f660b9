"""A trained verifier: is this answer to this question right, given the retrieved passages?

A small cross-encoder (MiniLM-L6, the embedding model's own network, with its top layers and a
one-logit head fine-tuned on our labelled development answers: ``rag.eval.verifier_training``)
reads the question with the answer, and an evidence window of the passage sentences that bear on
them (``evidence_window``), and returns P(right). Its saved weights hold only the tuned layers
and the head; the rest is loaded from the embedding model's folder, so the package stays small.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from guards.answers import answer_core, is_declined
from guards.base import Guard, GuardContext, GuardResult, Outcome
from guards.text import content_words, normalize, overlap, sentences

if TYPE_CHECKING:
    import torch

EVIDENCE_WORDS = 150
"""Evidence window size: about 200 word pieces, which with the question and the answer fits the
verifier's 256-token input."""
ANSWER_WORDS = 40
MAX_LENGTH = 256
FORMAT = "ragguard-verifier/1"


class VerifierLoadError(ValueError):
    """The verifier's weights do not fit the base model, or their file is not ours."""


def evidence_window(
    question: str, answer: str, passages: Sequence[str], max_words: int = EVIDENCE_WORDS
) -> str:
    """The passage sentences most relevant to the answer and the question, in passage order,
    within ``max_words``: a sentence holding the answer's core span first, then by the share of
    the answer's and the question's content words it holds; ties go to the better-ranked
    passage."""
    core = normalize(answer_core(answer))
    answer_words, question_words = content_words(answer_core(answer)), content_words(question)
    found: list[tuple[float, int, int, str]] = []
    for rank, passage in enumerate(passages):
        for position, sentence in enumerate(sentences(passage)):
            words = content_words(sentence)
            score = (
                2.0 * bool(core and f" {core} " in f" {normalize(sentence)} ")
                + overlap(answer_words, words)
                + 0.5 * overlap(question_words, words)
                - 0.01 * rank
            )
            found.append((score, rank, position, sentence))
    chosen, used = [], 0
    for _score, rank, position, sentence in sorted(found, key=lambda f: (-f[0], f[1], f[2])):
        n = len(sentence.split())
        if used and used + n > max_words:
            continue
        chosen.append((rank, position, " ".join(sentence.split()[:max_words])))
        used += min(n, max_words)
        if used >= max_words:
            break
    return " ".join(s for _, _, s in sorted(chosen))


def verifier_inputs(question: str, answer: str, passages: Sequence[str]) -> tuple[str, str]:
    """The (first, second) text pair the verifier reads."""
    short = " ".join(answer.split()[:ANSWER_WORDS])
    return f"{question.strip()} Answer: {short}", evidence_window(question, answer, passages)


class Verifier:
    """P(right) for (question, answer, passages) from a fine-tuned cross-encoder."""

    def __init__(self, model: Any, tokenizer: Any, *, max_length: int = MAX_LENGTH):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_length = max_length
        self._lock = threading.Lock()  # fast tokenizers toggle truncation state per call

    @classmethod
    def load(cls, weights: Path, base: Path, *, base_fingerprint: str | None = None) -> Verifier:
        """The base model's network (a BERT folder with ``model.safetensors``) with the tuned
        tensors of ``weights`` (a safetensors file with a ``.json`` description beside it);
        ``base_fingerprint``, when given, must match the one the description records."""
        meta_path = weights.with_suffix(".json")
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("format") != FORMAT:
            raise VerifierLoadError(f"{meta_path}: not a {FORMAT} description")
        if base_fingerprint is not None and meta.get("base_fingerprint") not in (
            None,
            base_fingerprint,
        ):
            raise VerifierLoadError(f"{weights} was trained over another build of {base}")
        tuned = _read_tensors(weights)
        model, tokenizer = base_network(base)
        own = model.state_dict()
        wrong = [k for k, v in tuned.items() if k not in own or own[k].shape != v.shape]
        if wrong:
            raise VerifierLoadError(f"{weights}: tensors that do not fit {base}: {wrong[:5]}")
        model.load_state_dict({k: v.to(own[k].dtype) for k, v in tuned.items()}, strict=False)
        return cls(model, tokenizer, max_length=int(meta.get("max_length", MAX_LENGTH)))

    def logits(self, pairs: Sequence[tuple[str, str]]) -> torch.Tensor:
        """The raw logit of each (first, second) pair, with gradients if enabled."""
        with self._lock:
            batch = self.tokenizer(
                [a for a, _ in pairs],
                [b for _, b in pairs],
                truncation="only_second",
                max_length=self.max_length,
                padding=True,
                return_tensors="pt",
            )
        device = next(self.model.parameters()).device
        out = self.model(**{k: v.to(device) for k, v in batch.items()})
        return out.logits.squeeze(-1)

    def score_pairs(self, pairs: Sequence[tuple[str, str]], batch_size: int = 16) -> list[float]:
        import torch

        scores: list[float] = []
        with torch.inference_mode():
            for i in range(0, len(pairs), batch_size):
                scores += torch.sigmoid(self.logits(pairs[i : i + batch_size])).tolist()
        return scores

    def score(self, question: str, answer: str, passages: Sequence[str]) -> float:
        """P(the answer is right) for one answer."""
        return self.score_pairs([verifier_inputs(question, answer, passages)])[0]


def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except SafetensorError as exc:
        raise VerifierLoadError(f"{path}: not a safetensors file ({exc})") from exc


def base_network(base: Path) -> tuple[Any, Any]:
    """A one-logit sequence classifier over the base BERT's weights (the head untrained), and
    its tokenizer, read from the local folder only."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    config = BertConfig.from_pretrained(str(base), num_labels=1, local_files_only=True)
    model = BertForSequenceClassification(config)
    tensors = {  # older exports also saved the position-id buffer
        k: v
        for k, v in _read_tensors(base / "model.safetensors").items()
        if not k.endswith("position_ids")
    }
    missing, unexpected = model.bert.load_state_dict(tensors, strict=False)
    if missing or unexpected:
        raise VerifierLoadError(f"{base} is not a BERT model: {(missing + unexpected)[:5]}")
    tokenizer = AutoTokenizer.from_pretrained(str(base), local_files_only=True)
    return model, tokenizer


def _logit(p: float, bound: float = 6.0) -> float:
    p = min(max(p, 1e-9), 1 - 1e-9)
    return max(-bound, min(bound, math.log(p / (1 - p))))


class VerifierGuard(Guard):
    """PASS when the trained verifier gives the answer P(right) >= ``min_score``; its signal is
    that probability's logit (clipped to ±6, 0 = even odds)."""

    name = "verifier"
    signals: ClassVar[Mapping[str, int]] = {"verifier": 1}

    def __init__(self, verifier: Verifier, *, min_score: float = 0.5):
        self.verifier = verifier
        self.min_score = min_score

    def check(self, ctx: GuardContext) -> GuardResult:
        if not ctx.passages:
            return self.abstain("no passages to verify the answer against")
        if is_declined(ctx.answer):
            return self.abstain("the answer declines")
        p = self.verifier.score(ctx.question, ctx.answer, [e.text for e in ctx.ranked])
        outcome = Outcome.PASS if p >= self.min_score else Outcome.FAIL
        reason = f"the trained verifier gives the answer P(right) {p:.2f}"
        return GuardResult(self.name, outcome, p, reason, {}, {"verifier": _logit(p)})
