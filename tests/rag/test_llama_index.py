"""llama-index both ways, with real llama-index objects: our engine as its LLM (complete, chat,
streaming, async), our embedder in a ``VectorStoreIndex``, the guards as its evaluator, our
relevance rule as a node postprocessor, and its retrievers (a vector index's, a custom one)
answering ragguard's questions. The fakes stand in for the models (``tests.fakes``)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.base.response.schema import Response
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from engine.threaded_client import ThreadedClient
from rag.errors import IndexNotFoundError
from rag.integrations.llama_index import (
    GuardEvaluationResult,
    GuardEvaluator,
    LlamaIndexRetriever,
    RagGuardEmbedding,
    RagGuardLLM,
    RelevancePostprocessor,
)
from tests.fakes import HashingEmbedder, ScriptedGenerator

if TYPE_CHECKING:
    from engine import LLMEngine
    from rag.pipeline import Pipeline

TEAM_DOCS = {
    "leave": "New hires get 25 vacation days per year. Unused days carry over to March.",
    "laptops": "Every engineer receives a laptop on the first day; it is replaced every three "
    "years.",
    "parking": "The office garage has 40 parking spaces, assigned by seniority.",
}
QUESTION = "How many vacation days do new hires get?"


@pytest.fixture
def llm() -> RagGuardLLM:
    return RagGuardLLM(ThreadedClient(ScriptedGenerator()), max_tokens=32)


@pytest.fixture
def vector_index() -> VectorStoreIndex:
    documents = [Document(text=text, doc_id=doc_id) for doc_id, text in TEAM_DOCS.items()]
    return VectorStoreIndex.from_documents(
        documents, embed_model=RagGuardEmbedding(HashingEmbedder())
    )


def test_the_llm_completes_chats_and_streams(llm: RagGuardLLM) -> None:
    prompt = "Passages:\n[1] Paris is the capital of France. It is large.\n\nQuestion: capital?"
    assert llm.complete(prompt).text == "Paris is the capital of France. [1]"
    deltas = [r.delta for r in llm.stream_complete(prompt)]
    assert "".join(d or "" for d in deltas) == "Paris is the capital of France. [1]"
    chat = llm.chat([ChatMessage(role="user", content=prompt)])
    assert chat.message.content == "Paris is the capital of France. [1]"
    assert llm.complete(prompt, max_tokens=2).text == "Paris is"
    assert llm.metadata.context_window == ScriptedGenerator.max_model_len

    async def both() -> tuple[str, str]:
        done = await llm.acomplete(prompt)
        parts = [r.delta or "" async for r in await llm.astream_complete(prompt)]
        return done.text, "".join(parts)

    assert asyncio.run(both()) == ("Paris is the capital of France. [1]",) * 2
    llm.close()


def test_a_llama_index_query_engine_runs_on_our_llm_and_embedder(
    llm: RagGuardLLM, vector_index: VectorStoreIndex
) -> None:
    retriever = vector_index.as_retriever(similarity_top_k=2)
    engine = RetrieverQueryEngine.from_args(
        retriever,
        llm=llm,
        node_postprocessors=[RelevancePostprocessor(HashingEmbedder(), min_score=0.1)],
    )
    response = engine.query(QUESTION)
    assert response.source_nodes[0].node.get_content() == TEAM_DOCS["leave"]
    assert str(response)  # the scripted generator answered from llama-index's own prompt


def test_the_postprocessor_rescores_drops_and_caps(vector_index: VectorStoreIndex) -> None:
    nodes = [NodeWithScore(node=TextNode(text=t), score=0.0) for t in TEAM_DOCS.values()]
    gate = RelevancePostprocessor(HashingEmbedder(), min_score=0.2, top_k=1)
    kept = gate.postprocess_nodes(nodes, QueryBundle(QUESTION))
    assert [n.node.get_content() for n in kept] == [TEAM_DOCS["leave"]]
    assert kept[0].score is not None and kept[0].score >= 0.2
    everything = RelevancePostprocessor(HashingEmbedder(), min_score=-1.0)
    assert len(everything.postprocess_nodes(nodes, QueryBundle(QUESTION))) == 3
    with pytest.raises(ValueError, match="query"):
        gate.postprocess_nodes(nodes)


def test_the_guards_evaluate_a_llama_index_response(fake_pipeline: Pipeline) -> None:
    evaluator = GuardEvaluator.from_pipeline(fake_pipeline)
    supported = evaluator.evaluate(
        query=QUESTION,
        response="New hires get 25 vacation days per year.",
        contexts=[TEAM_DOCS["leave"]],
    )
    unsupported = evaluator.evaluate(
        query=QUESTION,
        response="New hires get 90 vacation days and a free car.",
        contexts=[TEAM_DOCS["parking"]],
    )
    # llama-index's evaluate is declared to return its base EvaluationResult.
    assert isinstance(supported, GuardEvaluationResult)
    assert isinstance(unsupported, GuardEvaluationResult)
    assert supported.score is not None and unsupported.score is not None
    assert supported.score > unsupported.score
    assert supported.decision in ("answer", "review", "abstain")
    assert supported.passing == (supported.decision == "answer")
    assert unsupported.passing is False and unsupported.decision != "answer"
    assert unsupported.feedback and unsupported.feedback.startswith("decision: ")
    assert {g["name"] for g in unsupported.guard_results} >= {"grounding"}
    node = NodeWithScore(node=TextNode(text=TEAM_DOCS["leave"]), score=0.9)
    from_response = evaluator.evaluate_response(
        query=QUESTION,
        response=Response("New hires get 25 vacation days per year.", source_nodes=[node]),
    )
    assert from_response.score == pytest.approx(supported.score)
    with pytest.raises(ValueError, match="query"):
        evaluator.evaluate(query=None, response="x")


class KeywordRetriever(BaseRetriever):
    """A custom llama-index retriever: documents sharing a word with the query, by count."""

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        words = set(query_bundle.query_str.lower().split())
        scored = [
            NodeWithScore(node=TextNode(text=t, id_=f"kw-{d}"), score=float(n))
            for d, t in TEAM_DOCS.items()
            if (n := len(words & set(t.lower().split())))
        ]
        return sorted(scored, key=lambda n: -(n.score or 0.0))


def test_llama_index_retrievers_answer_ragguard_questions(
    fake_pipeline: Pipeline, vector_index: VectorStoreIndex
) -> None:
    embedder = fake_pipeline.embedder
    fake_pipeline.retriever.register(
        "team", LlamaIndexRetriever(vector_index.as_retriever(similarity_top_k=2), embedder)
    )
    fake_pipeline.retriever.register("keywords", LlamaIndexRetriever(KeywordRetriever()))
    assert fake_pipeline.retriever.registered == ["keywords", "team"]
    result = fake_pipeline.ask(QUESTION, index="team", min_score=0.0)
    assert result.passages[0].text == TEAM_DOCS["leave"]
    assert result.passages[0].doc_id == "leave"  # the node's source document
    assert result.answer.startswith("New hires get 25 vacation days per year.")
    assert result.citations and result.citations[0].doc_id == "leave"
    # The vector index's scores were cosines already; rescored with the same embedder they hold.
    assert 0.0 < result.passages[0].score <= 1.0
    keyword = fake_pipeline.ask(QUESTION, index="keywords", min_score=-1.0)
    assert keyword.passages[0].chunk_id == "kw-leave"
    assert keyword.passages[0].score >= 1.0  # the retriever's own score (a word count) is kept
    fake_pipeline.retriever.unregister("team")
    with pytest.raises(IndexNotFoundError):
        fake_pipeline.ask(QUESTION, index="team")


def test_the_llm_over_our_real_engine_gives_the_engines_answer(llm_engine: LLMEngine) -> None:
    from engine import SamplingParams, as_engine_client

    client, _ = as_engine_client(llm_engine)
    llm = RagGuardLLM(client, max_tokens=16)
    try:
        messages = [{"role": "user", "content": "Name three colours."}]
        expected = (
            llm_engine.generate(
                [llm_engine.apply_chat_template(messages)], SamplingParams(max_tokens=16)
            )[0]
            .outputs[0]
            .text
        )
        chat = llm.chat([ChatMessage(role="user", content="Name three colours.")])
        assert chat.message.content == expected and expected
        streamed = "".join(
            r.delta or ""
            for r in llm.stream_chat([ChatMessage(role="user", content="Name three colours.")])
        )
        assert streamed == expected
    finally:
        llm.close()
        client.shutdown()
