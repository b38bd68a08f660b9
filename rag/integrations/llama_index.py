"""llama-index both ways: ragguard's engine, embedder and guards inside llama-index pipelines, and
any llama-index retriever inside ragguard's.

- ``RagGuardLLM``: a llama-index LLM over an engine client (``complete``, ``chat``, streaming,
  async), so a llama-index query engine or agent generates on our engine (or on whatever
  backend the client wraps: a remote OpenAI-compatible server, the transformers baseline).
- ``RagGuardEmbedding``: our sentence-transformers embedder as a llama-index embedding model.
- ``GuardEvaluator``: ragguard's guards, confidence and policy as a llama-index evaluator: a
  query, a response and its contexts (or a ``Response`` with source nodes) in; ``passing``
  (the policy would answer), ``score`` (the confidence), ``feedback`` and the decision out.
- ``RelevancePostprocessor``: ragguard's relevance rule as a node postprocessor: nodes rescored
  by cosine similarity to the query with our embedder, those under ``min_score`` dropped. (The
  guards judge an answer, which does not exist yet when node postprocessors run: they are the
  evaluator's job.)
- ``LlamaIndexRetriever``: any llama-index retriever (a ``VectorStoreIndex``'s, a BM25
  retriever, a custom one) as a ragguard ``Retriever``; register it on a pipeline with
  ``pipeline.retriever.register(name, retriever)`` and ask with ``index=name``.

llama-index-core is a dependency of ragguard already (it splits documents), so nothing more is
installed for these.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import (
    ChatMessage,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.base.response.schema import Response
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.evaluation import BaseEvaluator, EvaluationResult
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.llms.custom import CustomLLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.prompts.mixin import PromptDictType
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle

from engine import EngineClient, RequestOutput, SamplingParams, generate_all
from guards import Action, Candidate
from rag.background import BackgroundLoop
from rag.retrieval.embed import Embedder
from rag.retrieval.retriever import Retriever
from rag.stages.check import AnswerChecker
from rag.types import Passage

__all__ = [
    "GuardEvaluationResult",
    "GuardEvaluator",
    "LlamaIndexRetriever",
    "RagGuardEmbedding",
    "RagGuardLLM",
    "RelevancePostprocessor",
]


# ------------------------------------------------------------------------------ the LLM
class RagGuardLLM(CustomLLM):
    """A llama-index LLM generating on a ragguard engine client.

    ``complete`` sends the prompt as it is; ``chat`` renders the messages with the model's own
    chat template first. ``temperature``, ``max_tokens`` and ``stop`` may be given per call."""

    max_tokens: int = Field(256, ge=1, description="completion length limit in tokens")
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="0 = greedy")
    _engine: EngineClient = PrivateAttr()
    _loop: BackgroundLoop = PrivateAttr()

    def __init__(self, engine: EngineClient, **kwargs: Any):
        super().__init__(messages_to_prompt=self._render, **kwargs)
        self._engine = engine
        self._loop = BackgroundLoop("ragguard-llama-index")

    @classmethod
    def class_name(cls) -> str:
        return "ragguard_llm"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(
            context_window=self._engine.max_model_len,
            num_output=self.max_tokens,
            model_name=self._engine.model_name,
            is_chat_model=False,
        )

    def _render(self, messages: Sequence[ChatMessage]) -> str:
        turns = [{"role": m.role.value, "content": m.content or ""} for m in messages]
        return self._engine.apply_chat_template(turns)

    def _params(self, kwargs: dict[str, Any]) -> SamplingParams:
        return SamplingParams(
            temperature=float(kwargs.get("temperature", self.temperature)),
            max_tokens=int(kwargs.get("max_tokens", self.max_tokens)),
            stop=list(kwargs.get("stop") or []),
            seed=kwargs.get("seed"),
        )

    @staticmethod
    def _response(output: RequestOutput) -> CompletionResponse:
        completion = output.outputs[0]
        raw = {
            "finish_reason": str(completion.finish_reason),
            "prompt_tokens": output.num_prompt_tokens,
            "completion_tokens": len(completion.token_ids),
        }
        return CompletionResponse(text=completion.text, raw=raw)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return self._loop.run(self.acomplete(prompt, formatted=formatted, **kwargs))

    @llm_completion_callback()
    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        output = await generate_all(self._engine, prompt, self._params(kwargs))
        return self._response(output)

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        deltas = self._loop.iterate(self._deltas(prompt, self._params(kwargs)))

        def responses() -> CompletionResponseGen:
            yield from deltas

        return responses()

    @llm_completion_callback()
    async def astream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseAsyncGen:
        return self._deltas(prompt, self._params(kwargs))

    async def _deltas(
        self, prompt: str, params: SamplingParams
    ) -> AsyncGenerator[CompletionResponse, None]:
        sent = ""
        async for output in self._engine.generate(prompt, params):
            text = output.outputs[0].text
            if len(text) > len(sent) and text.startswith(sent):
                yield CompletionResponse(text=text, delta=text[len(sent) :])
                sent = text

    def close(self) -> None:
        """Stop the loop the synchronous calls run on (the engine stays the caller's)."""
        self._loop.close()


# ------------------------------------------------------------------------ the embedder
class RagGuardEmbedding(BaseEmbedding):
    """Our embedder as a llama-index embedding model (normalised vectors: dot = cosine)."""

    _embedder: Embedder = PrivateAttr()

    def __init__(self, embedder: Embedder, **kwargs: Any):
        super().__init__(model_name=embedder.model_id, **kwargs)
        self._embedder = embedder

    @classmethod
    def class_name(cls) -> str:
        return "ragguard_embedding"

    def _get_query_embedding(self, query: str) -> list[float]:
        return [float(x) for x in self._embedder.embed_query(query)]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return await asyncio.to_thread(self._get_query_embedding, query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embeddings([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return [[float(x) for x in row] for row in self._embedder.embed(texts)]


def _cosines(embedder: Embedder, query: str, texts: Sequence[str]) -> list[float]:
    if not texts:
        return []
    vectors = embedder.embed(list(texts), batch_size=len(texts))
    return [float(v) for v in vectors @ embedder.embed_query(query)]


# ------------------------------------------------------------------- the guards, twice
class GuardEvaluationResult(EvaluationResult):
    """An ``EvaluationResult`` with what ragguard's policy decided and why."""

    decision: str = Field(..., description="answer, abstain or review")
    reasons: list[str] = Field(default_factory=list)
    guard_results: list[dict[str, Any]] = Field(default_factory=list)


class GuardEvaluator(BaseEvaluator):
    """ragguard's guards, confidence and policy on a llama-index answer.

    ``passing``: the policy would answer (neither withhold it nor send it to review); ``score``:
    the confidence in [0, 1]; ``feedback``: the decision, its reasons and every failed guard.
    Contexts are scored by cosine similarity to the query with ``embedder``, as ragguard's
    retrieval scores passages, so the confidence means what it means in the pipeline."""

    def __init__(self, checker: AnswerChecker, embedder: Embedder):
        self.checker = checker
        self.embedder = embedder

    @classmethod
    def from_pipeline(cls, pipeline: Any) -> GuardEvaluator:
        """The guards configured on a ``rag.pipeline.Pipeline`` (guards must be enabled)."""
        if pipeline.checker is None:
            raise ValueError("the pipeline's guards are disabled (guards_enabled=False)")
        return cls(pipeline.checker, pipeline.embedder)

    def _get_prompts(self) -> PromptDictType:
        return {}

    def _update_prompts(self, prompts_dict: PromptDictType) -> None:
        return None

    async def aevaluate(
        self,
        query: str | None = None,
        response: str | None = None,
        contexts: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> GuardEvaluationResult:
        if not query or response is None:
            raise ValueError("the guards need the query and the response")
        texts = list(contexts or [])
        return await asyncio.to_thread(self._evaluate, query, response, texts)

    async def aevaluate_response(
        self, query: str | None = None, response: Response | None = None, **kwargs: Any
    ) -> GuardEvaluationResult:
        contexts = [n.node.get_content() for n in (response.source_nodes if response else [])]
        answer = response.response if response is not None else None
        return await self.aevaluate(query, answer, contexts, **kwargs)

    def _evaluate(self, query: str, response: str, texts: list[str]) -> GuardEvaluationResult:
        scores = _cosines(self.embedder, query, texts)
        passages = [
            Passage(f"context-{i}", f"context-{i}", text, score)
            for i, (text, score) in enumerate(zip(texts, scores, strict=True))
        ]
        given = Candidate(response.strip())
        checked = self.checker.check(query, given, [given], passages)
        decision = self.checker.decide(checked)
        reports = checked.reports()
        failed = [f"{v.name}: {v.reason}" for v in reports if v.outcome == "fail"]
        feedback = "; ".join([f"decision: {decision.action.value}", *decision.reasons, *failed])
        return GuardEvaluationResult(
            query=query,
            contexts=texts,
            response=response,
            passing=decision.action is Action.ANSWER,
            score=checked.confidence,
            feedback=feedback,
            decision=decision.action.value,
            reasons=list(decision.reasons),
            guard_results=[
                {"name": v.name, "outcome": v.outcome, "score": v.score, "reason": v.reason}
                for v in reports
            ],
        )


class RelevancePostprocessor(BaseNodePostprocessor):
    """ragguard's relevance rule for llama-index nodes: rescored by cosine similarity to the
    query with our embedder, best first, those under ``min_score`` dropped (at most ``top_k``
    kept when set)."""

    min_score: float = Field(0.25, ge=-1.0, le=1.0)
    top_k: int | None = Field(None, ge=1)
    _embedder: Embedder = PrivateAttr()

    def __init__(self, embedder: Embedder, **kwargs: Any):
        super().__init__(**kwargs)
        self._embedder = embedder

    @classmethod
    def class_name(cls) -> str:
        return "ragguard_relevance"

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if query_bundle is None:
            raise ValueError("the relevance rule needs the query")
        scores = _cosines(
            self._embedder, query_bundle.query_str, [n.node.get_content() for n in nodes]
        )
        ranked = sorted(
            (NodeWithScore(node=n.node, score=s) for n, s in zip(nodes, scores, strict=True)),
            key=lambda n: -(n.score or 0.0),
        )
        kept = [n for n in ranked if (n.score or 0.0) >= self.min_score]
        return kept[: self.top_k] if self.top_k is not None else kept


# ------------------------------------------------------------------ their retrievers in ours
class LlamaIndexRetriever(Retriever):
    """A llama-index retriever as ragguard's: its nodes become passages, best first as it
    ranked them. With ``embedder`` (give it the pipeline's: ``pipeline.embedder``) each
    passage's score is its cosine similarity to the query, as in ragguard's own retrieval, so
    ``min_score`` and the confidence mean the same whatever scored the nodes (a BM25 score is
    not a cosine); without it the retriever's own scores are kept."""

    def __init__(self, retriever: BaseRetriever, embedder: Embedder | None = None):
        self.retriever = retriever
        self.embedder = embedder

    def _retrieve(self, query: str, top_k: int) -> list[Passage]:
        nodes = self.retriever.retrieve(query)[:top_k]
        texts = [n.node.get_content() for n in nodes]
        scores = (
            _cosines(self.embedder, query, texts)
            if self.embedder is not None
            else [float(n.score or 0.0) for n in nodes]
        )
        return [
            Passage(
                doc_id=n.node.ref_doc_id or n.node.node_id,
                chunk_id=n.node.node_id,
                text=text,
                score=score,
                metadata=dict(n.node.metadata),
            )
            for n, text, score in zip(nodes, texts, scores, strict=True)
        ]
