"""An OpenAI-compatible API: ``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``.

The loaded model's id generates straight from the engine (sampling, ``n``, stop strings,
log-probabilities, streaming). The model id ``ragguard`` answers from the index instead: the last
user message is the question, the full pipeline runs (retrieve, generate, check, decide), and the
answer carries an extra ``ragguard`` field with citations, passages and the guards' decision.

Every error of these routes, request validation included, is answered in OpenAI's shape
(``{"error": {"message", "type", "param", "code"}}``) by the routes' own class, so that OpenAI
clients raise their usual exceptions; the app's other routes keep ragguard's shape.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from engine import EngineClient, SamplingParams
from rag.server.calls import Call, CallDep
from rag.server.openai.errors import OpenAIAPIError, OpenAIRoute
from rag.server.openai.grounded import answer_grounded
from rag.server.openai.logprobs import Tokens
from rag.server.openai.raw import RawJob, generate_raw
from rag.server.openai.reply import Reply
from rag.server.openai.schemas import (
    GROUNDED_MODEL,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatMessage,
    CompletionRequest,
    CompletionResponse,
    GenerationRequest,
    ModelCard,
    ModelList,
    OpenAIErrorOut,
)
from rag.server.state import CheckerDep, EngineDep, PipelineDep
from rag.types import AskOptions

COMPLETIONS_DEFAULT_MAX_TOKENS = 16
"""OpenAI's default for ``/v1/completions``; chat completions default to the server's
``max_tokens`` setting."""

_STARTED = int(time.time())


_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": OpenAIErrorOut} for code in (400, 401, 403, 404, 429, 503, 504)
}
_STREAMED: dict[int | str, dict[str, Any]] = {
    **_ERRORS,
    200: {
        "content": {"text/event-stream": {}},
        "description": "the completion (JSON), or with `stream: true` server-sent events: "
        "`data: {chunk}` events, then `data: [DONE]`",
    },
}

router = APIRouter(prefix="/v1", tags=["openai"], route_class=OpenAIRoute)


def _model_ids(engine: EngineClient) -> list[str]:
    return [engine.model_name, GROUNDED_MODEL]


def _card(model_id: str, engine: EngineClient) -> ModelCard:
    context = engine.max_model_len if model_id == engine.model_name else None
    return ModelCard(id=model_id, created=_STARTED, owned_by="ragguard", max_model_len=context)


def _check_model(engine: EngineClient, model: str) -> bool:
    """Whether ``model`` is the grounded model; 404 when it is neither id served."""
    if model == GROUNDED_MODEL:
        return True
    if model == engine.model_name:
        return False
    raise OpenAIAPIError(
        404,
        f"the model {model!r} does not exist; this server has {_model_ids(engine)}",
        param="model",
        code="model_not_found",
    )


@router.get("/models", response_model=ModelList, responses=_ERRORS)
async def list_models(engine: EngineDep) -> ModelList:
    """The loaded model (raw generation) and ``ragguard`` (grounded answers)."""
    return ModelList(data=[_card(m, engine) for m in _model_ids(engine)])


@router.get("/models/{model_id:path}", response_model=ModelCard, responses=_ERRORS)
async def retrieve_model(model_id: str, engine: EngineDep) -> ModelCard:
    """One model by id; 404 for an id this server does not serve."""
    _check_model(engine, model_id)
    return _card(model_id, engine)


# ============================================================ completions
@router.post(
    "/completions",
    response_model=CompletionResponse,
    responses=_STREAMED,
)
async def completions(
    body: CompletionRequest,
    call: CallDep,
    engine: EngineDep,
    pipeline: PipelineDep,
    checker: CheckerDep,
) -> Response:
    """Complete one prompt or a list of them (``n`` choices each, indexed on across prompts).
    With ``model: "ragguard"`` the prompt is a question answered from the index."""
    is_grounded = _check_model(engine, body.model)
    if body.echo:
        raise OpenAIAPIError(400, "echo is not supported", param="echo")
    if body.suffix:
        raise OpenAIAPIError(400, "suffix is not supported", param="suffix")
    if body.best_of is not None and body.best_of != body.n:
        raise OpenAIAPIError(400, "best_of is not supported (only best_of = n)", param="best_of")
    prompts = body.prompts
    if not prompts:
        raise OpenAIAPIError(400, "prompt is empty", param="prompt")
    if is_grounded:
        if len(prompts) != 1:
            raise OpenAIAPIError(
                400,
                f"the {GROUNDED_MODEL} model answers one question (a prompt string)",
                param="prompt",
            )
        options = _grounded_options(body, body.max_tokens, logprobs=body.logprobs is not None)
        reply = _grounded_reply(call, chat=False, include_usage=body.include_usage)
        return await answer_grounded(call, pipeline, checker, reply, prompts[0], options, body)
    params = _sampling(body, body.max_tokens, COMPLETIONS_DEFAULT_MAX_TOKENS, body.logprobs)
    job = _raw_job(engine, body, chat=False, top_k=body.logprobs)
    return await _generate(call, engine, job, prompts, params, body)


@router.post(
    "/chat/completions",
    response_model=ChatCompletionResponse,
    responses=_STREAMED,
)
async def chat_completions(
    body: ChatCompletionRequest,
    call: CallDep,
    engine: EngineDep,
    pipeline: PipelineDep,
    checker: CheckerDep,
) -> Response:
    """Answer a conversation in the model's chat format. With ``model: "ragguard"`` the last
    user message is answered from the index, with citations and the guards' decision."""
    is_grounded = _check_model(engine, body.model)
    if body.tools:
        raise OpenAIAPIError(400, "tools are not supported", param="tools")
    if body.top_logprobs is not None and not body.logprobs:
        raise OpenAIAPIError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
    max_tokens = (
        body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    )
    messages = [_message(m, i) for i, m in enumerate(body.messages)]
    if is_grounded:
        users = [m["content"] for m in messages if m["role"] == "user"]
        if not users or not users[-1].strip():
            raise OpenAIAPIError(
                400,
                f"the {GROUNDED_MODEL} model needs a user message (the question)",
                param="messages",
            )
        options = _grounded_options(body, max_tokens, logprobs=body.logprobs)
        reply = _grounded_reply(call, chat=True, include_usage=body.include_usage)
        return await answer_grounded(call, pipeline, checker, reply, users[-1], options, body)
    top_k = (body.top_logprobs or 0) if body.logprobs else None
    params = _sampling(body, max_tokens, call.state.settings.generation.max_tokens, top_k)
    prompt = engine.apply_chat_template(messages)
    job = _raw_job(engine, body, chat=True, top_k=top_k)
    return await _generate(call, engine, job, [prompt], params, body)


def _grounded_reply(call: Call, *, chat: bool, include_usage: bool) -> Reply:
    """The grounded answer's shape; its id is the request's, so that the response id names the
    answer for feedback."""
    return Reply(chat=chat, model=GROUNDED_MODEL, include_usage=include_usage, id=call.request_id)


def _raw_job(
    engine: EngineClient, body: GenerationRequest, *, chat: bool, top_k: int | None
) -> RawJob:
    reply = Reply(chat=chat, model=body.model, include_usage=body.include_usage)
    tokens = Tokens(engine.tokenizer)
    return RawJob(reply=reply, n=body.n, stops=body.stop_list, top_k=top_k, tokens=tokens)


async def _generate(
    call: Call,
    engine: EngineClient,
    job: RawJob,
    prompts: list[str],
    params: SamplingParams,
    body: GenerationRequest,
) -> Response:
    timeout_s = call.state.settings.server.request_timeout_s
    return await generate_raw(call, engine, job, prompts, params, body, timeout_s)


def _message(message: ChatMessage, position: int) -> dict[str, str]:
    """A chat message as the chat template takes it: text content only."""
    if message.role == "tool":
        raise OpenAIAPIError(
            400, "tool messages are not supported", param=f"messages.{position}.role"
        )
    content = message.content
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:
        parts = []
        for part in content:
            if part.type != "text" or part.text is None:
                raise OpenAIAPIError(
                    400,
                    f"only text content parts are supported, got {part.type!r}",
                    param=f"messages.{position}.content",
                )
            parts.append(part.text)
        text = "\n".join(parts)
    role = "system" if message.role == "developer" else message.role
    return {"role": role, "content": text}


def _sampling(
    body: GenerationRequest, max_tokens: int | None, default_max: int, logprobs: int | None
) -> SamplingParams:
    """The engine's parameters (OpenAI's defaults: temperature 1, top_p 1); a bad value raises
    ``ValueError`` (a 400 naming the field)."""
    if body.logit_bias:
        raise OpenAIAPIError(400, "logit_bias is not supported", param="logit_bias")
    return SamplingParams(
        n=body.n,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        max_tokens=default_max if max_tokens is None else max_tokens,
        stop=body.stop_list,
        seed=body.seed,
        presence_penalty=body.presence_penalty or 0.0,
        frequency_penalty=body.frequency_penalty or 0.0,
        logprobs=logprobs,
        ignore_eos=body.ignore_eos,
    )


def _grounded_options(
    body: GenerationRequest, max_tokens: int | None, *, logprobs: bool
) -> AskOptions:
    """The pipeline's options; what the grounded model cannot honour is refused up front."""
    if body.n != 1:
        raise OpenAIAPIError(
            400, f"the {GROUNDED_MODEL} model returns one answer (n = 1)", param="n"
        )
    unsupported = {
        "stop": bool(body.stop_list),
        "logprobs": logprobs,
        "top_p": body.top_p not in (None, 1.0),
        "presence_penalty": bool(body.presence_penalty),
        "frequency_penalty": bool(body.frequency_penalty),
        "logit_bias": bool(body.logit_bias),
    }
    for name, asked in unsupported.items():
        if asked:
            raise OpenAIAPIError(
                400, f"{name} is not supported by the {GROUNDED_MODEL} model", param=name
            )
    # Validate what the generation will use now, while a status code can still be sent.
    SamplingParams(temperature=body.temperature or 0.0, max_tokens=max_tokens or 1, seed=body.seed)
    return AskOptions(
        index=body.index,
        top_k=body.top_k,
        min_score=body.min_score,
        retrieval=body.retrieval,
        max_tokens=max_tokens,
        temperature=body.temperature,
        seed=body.seed,
        abstain_below=body.abstain_below,
        review_below=body.review_below,
        timeout_s=body.timeout_s,
    )


# ========================================================= raw generation
