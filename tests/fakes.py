"""Stand-ins for the two models, for tests of the routers and stages that need a pipeline but
not its models' judgement: a hashing embedder and a generator that answers with the first
sentence of the prompt's first passage. Both are deterministic and instant, so the tests built
on them run in the fast tier (``make test-fast``); what the real models do is tested with them."""

from __future__ import annotations

import re
import time
import zlib
from collections.abc import Sequence

import numpy as np

from engine.outputs import CompletionOutput, FinishReason, RequestOutput, RequestTiming
from engine.sampling_params import SamplingParams
from rag.retrieval.embed import Embedder

_WORD = re.compile(r"\w+")
_FIRST_PASSAGE = re.compile(r"\[1\] (.+?[.!?])(?:\s|$)", re.DOTALL)


VOCABULARY = 30_000


def _word_ids(text: str, vocabulary: int = VOCABULARY) -> list[int]:
    return [zlib.crc32(w.encode()) % vocabulary for w in _WORD.findall(text.casefold())]


class HashingEmbedder(Embedder):
    """``rag.retrieval.embed.Embedder`` over hashed bags of words: texts sharing words are close
    (cosine of the word counts), real FAISS indexes and searches them. A subclass, so it goes
    wherever the real one does; it overrides every method and loads no model."""

    model_id = "hashing-embedder-test"
    dimension = 256
    max_seq_length = 256

    def __init__(self) -> None:
        """Nothing to load (``Embedder.__init__`` loads the sentence-transformers model)."""

    def tokenize(self, text: str) -> list[int]:
        return _word_ids(text)

    def embed(
        self, texts: list[str], *, batch_size: int = 64, show_progress: bool = False
    ) -> np.ndarray:
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for index in _word_ids(text, self.dimension):
                vectors[row, index] += 1.0
            norm = float(np.linalg.norm(vectors[row]))
            vectors[row] /= norm if norm else 1.0
        return vectors

    def embed_query(self, text: str) -> np.ndarray:
        vector: np.ndarray = self.embed([text])[0]
        return vector


class ScriptedGenerator:
    """A ``engine.generator.Generator`` that answers every grounded prompt with the first sentence
    of passage [1] and a citation of it (``I don't know.`` when the prompt has no passage). Tokens
    are words; each has log-probability -0.1. ``max_tokens`` cuts the answer (finish "length")."""

    model_name = "scripted-generator-test"
    max_model_len = 4096
    tokenizer = None

    def count_tokens(self, prompt: str) -> int:
        return len(_WORD.findall(prompt)) + prompt.count("\n")

    def apply_chat_template(self, messages: list[dict[str, str]]) -> str:
        return "".join(f"<{m['role']}>\n{m['content']}\n" for m in messages) + "<assistant>\n"

    def _text(self, prompt: str) -> str:
        found = _FIRST_PASSAGE.search(prompt)
        return f"{found.group(1)} [1]" if found else "I don't know."

    def generate(
        self, prompts: Sequence[str | list[int]], params: SamplingParams | Sequence[SamplingParams]
    ) -> list[RequestOutput]:
        many = params if isinstance(params, Sequence) else [params] * len(prompts)
        outputs = []
        for i, (prompt, p) in enumerate(zip(prompts, many, strict=True)):
            text = prompt if isinstance(prompt, str) else " ".join(map(str, prompt))
            words = self._text(text).split(" ")
            finish = FinishReason.STOP
            if len(words) > p.max_tokens:
                words, finish = words[: p.max_tokens], FinishReason.LENGTH
            ids = [zlib.crc32(w.encode()) % VOCABULARY for w in words]  # one token per word
            completions = [
                CompletionOutput(j, " ".join(words), ids, [-0.1] * len(ids), finish)
                for j in range(p.n)
            ]
            now = time.perf_counter()
            timing = RequestTiming(now, now, now, now, [now] * len(ids))
            prompt_ids = _word_ids(text)
            outputs.append(
                RequestOutput(f"scripted-{i}", text, prompt_ids, completions, True, timing)
            )
        return outputs
