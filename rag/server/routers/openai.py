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

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.client import EngineClient
from engine.client import EngineUnavailableError as EngineDown
from engine.errors import EngineError
from engine.outputs import CompletionOutput, FinishReason, RequestOutput, streamable_text
from engine.sampling_params import SamplingParams
from rag.errors import (
    AuthenticationError,
    DeadlineExceededError,
    EngineUnavailableError,
    OverloadedError,
    RagGuardError,
)
from rag.pipeline import Pipeline
from rag.server.disconnect import ClientDisconnected, unless_disconnected
from rag.server.openai_schemas import (
    GROUNDED_MODEL,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatLogprobs,
    ChatMessage,
    ChatMessageOut,
    CompletionChoice,
    CompletionChunk,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
    Delta,
    GenerationRequest,
    Grounding,
    ModelCard,
    ModelList,
    OpenAIErrorDetail,
    OpenAIErrorOut,
    TokenLogprob,
    TopLogprob,
    Usage,
)
from rag.server.schemas import AskResponse
from rag.server.state import PipelineDep, ServerState, StateDep
from rag.types import AskOptions, Result, ResultEvent, TokenEvent, result_of

logger = logging.getLogger(__name__)

COMPLETIONS_DEFAULT_MAX_TOKENS = 16
"""OpenAI's default for ``/v1/completions``; chat completions default to the server's
``max_tokens`` setting."""

_MIN_LOGPROB = -9999.0
"""Log-probabilities are clamped here: JSON has no -inf."""

_STARTED = int(time.time())


# ================================================================== errors
class OpenAIAPIError(Exception):
    """A request this API refuses, with OpenAI's error fields."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        error_type: str | None = None,
    ):
        super().__init__(message)
        self.status_code = status_code
        self.param = param
        self.code = code
        self.error_type = error_type or _type_for(status_code)


def _type_for(status: int) -> str:
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


_PARAMS = (
    "n",
    "temperature",
    "top_p",
    "max_tokens",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "logprobs",
)


def _param_of(message: str) -> str | None:
    """The request field a ``SamplingParams`` message names ("temperature must be in ...")."""
    first = message.split(" ", 1)[0]
    if first == "stop":
        return "stop"
    return first if first in _PARAMS else None


@dataclass(slots=True)
class _Failure:
    status: int
    detail: OpenAIErrorDetail
    headers: dict[str, str] = field(default_factory=dict)


def _failure(request: Request, exc: Exception) -> _Failure:
    """What to answer for ``exc``, in OpenAI's terms."""
    if isinstance(exc, OpenAIAPIError):
        detail = OpenAIErrorDetail(
            message=str(exc), type=exc.error_type, param=exc.param, code=exc.code
        )
        return _Failure(exc.status_code, detail)
    if isinstance(exc, RequestValidationError):
        errors = exc.errors()
        where = [
            "" if e.get("type") == "json_invalid" else ".".join(str(p) for p in e["loc"][1:])
            for e in errors
        ]
        message = "; ".join(
            f"{loc or 'body'}: {e.get('msg', 'invalid')}"
            for loc, e in zip(where, errors, strict=True)
        )
        detail = OpenAIErrorDetail(
            message=message or "invalid request body",
            type="invalid_request_error",
            param=where[0] if where and where[0] else None,
            code="invalid_value",
        )
        return _Failure(400, detail)
    if isinstance(exc, RagGuardError):
        status = 400 if exc.status_code == 422 else exc.status_code
        detail = OpenAIErrorDetail(
            message=str(exc), type=_type_for(status), param=None, code=exc.error_type
        )
        failure = _Failure(status, detail)
        if isinstance(exc, AuthenticationError):
            failure.headers["www-authenticate"] = "Bearer"
        if isinstance(exc, OverloadedError):
            failure.headers["retry-after"] = str(exc.retry_after_s)
            state: ServerState = request.app.state.ragguard
            state.telemetry.rejected.inc()
        return failure
    if isinstance(exc, ValueError):  # SamplingParams, a prompt too long for the context
        message = str(exc)
        detail = OpenAIErrorDetail(
            message=message,
            type="invalid_request_error",
            param=_param_of(message),
            code="invalid_value",
        )
        return _Failure(400, detail)
    if isinstance(exc, EngineDown):
        detail = OpenAIErrorDetail(message=str(exc), type="server_error", code="engine_unavailable")
        return _Failure(503, detail)
    if isinstance(exc, StarletteHTTPException):
        detail = OpenAIErrorDetail(
            message=str(exc.detail), type=_type_for(exc.status_code), code="http_error"
        )
        return _Failure(exc.status_code, detail, dict(exc.headers or {}))
    if isinstance(exc, EngineError):
        logger.error("engine error on %s: %s", request.url.path, exc)
        detail = OpenAIErrorDetail(message=str(exc), type="server_error", code="engine_error")
        return _Failure(500, detail)
    logger.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    detail = OpenAIErrorDetail(
        message="internal server error; see the server log", type="server_error", code=None
    )
    return _Failure(500, detail)


def error_response(request: Request, exc: Exception) -> JSONResponse:
    """``exc`` as an OpenAI error response."""
    failure = _failure(request, exc)
    body = OpenAIErrorOut(error=failure.detail).model_dump(mode="json")
    return JSONResponse(body, status_code=failure.status, headers=failure.headers)


def _error_event(request: Request, exc: Exception) -> ServerSentEvent:
    """An error after a stream has started: an ``{"error": ...}`` data event (OpenAI clients
    raise it as ``APIError``)."""
    failure = _failure(request, exc)
    return _event(OpenAIErrorOut(error=failure.detail).model_dump(mode="json"))


class OpenAIRoute(APIRoute):
    """A route whose errors (validation, authentication, refused values, overload) are answered
    in OpenAI's error shape. A client that went away is left to the app (499)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def openai_route_handler(request: Request) -> Response:
            try:
                return await handle(request)
            except ClientDisconnected:
                raise
            except Exception as exc:
                return error_response(request, exc)

        return openai_route_handler


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


# ================================================================== models
def _model_ids(pipeline: Pipeline) -> list[str]:
    return [pipeline.engine.model_name, GROUNDED_MODEL]


def _card(model_id: str) -> ModelCard:
    return ModelCard(id=model_id, created=_STARTED, owned_by="ragguard")


def _check_model(pipeline: Pipeline, model: str) -> bool:
    """Whether ``model`` is the grounded model; 404 when it is neither id served."""
    if model == GROUNDED_MODEL:
        return True
    if model == pipeline.engine.model_name:
        return False
    raise OpenAIAPIError(
        404,
        f"the model {model!r} does not exist; this server has {_model_ids(pipeline)}",
        param="model",
        code="model_not_found",
    )


@router.get("/models", response_model=ModelList, responses=_ERRORS)
async def list_models(pipeline: PipelineDep) -> ModelList:
    """The loaded model (raw generation) and ``ragguard`` (grounded answers)."""
    return ModelList(data=[_card(m) for m in _model_ids(pipeline)])


@router.get("/models/{model_id:path}", response_model=ModelCard, responses=_ERRORS)
async def retrieve_model(model_id: str, pipeline: PipelineDep) -> ModelCard:
    """One model by id; 404 for an id this server does not serve."""
    _check_model(pipeline, model_id)
    return _card(model_id)


# ============================================================ completions
@router.post(
    "/completions",
    response_model=CompletionResponse,
    responses=_STREAMED,
)
async def completions(
    body: CompletionRequest, request: Request, pipeline: PipelineDep, state: StateDep
) -> Response:
    """Complete one prompt or a list of them (``n`` choices each, indexed on across prompts).
    With ``model: "ragguard"`` the prompt is a question answered from the index."""
    arrival = time.perf_counter()
    grounded = _check_model(pipeline, body.model)
    if body.echo:
        raise OpenAIAPIError(400, "echo is not supported", param="echo")
    if body.suffix:
        raise OpenAIAPIError(400, "suffix is not supported", param="suffix")
    if body.best_of is not None and body.best_of != body.n:
        raise OpenAIAPIError(400, "best_of is not supported (only best_of = n)", param="best_of")
    prompts = body.prompts
    if not prompts:
        raise OpenAIAPIError(400, "prompt is empty", param="prompt")
    if grounded:
        if len(prompts) != 1:
            raise OpenAIAPIError(
                400,
                f"the {GROUNDED_MODEL} model answers one question (a prompt string)",
                param="prompt",
            )
        options = _grounded_options(body, body.max_tokens, logprobs=body.logprobs is not None)
        job = _GroundedJob(chat=False, model=GROUNDED_MODEL, include_usage=body.include_usage)
        return await _grounded(request, pipeline, state, job, prompts[0], options, arrival, body)
    params = _sampling(body, body.max_tokens, COMPLETIONS_DEFAULT_MAX_TOKENS, body.logprobs)
    raw = _RawJob(
        chat=False,
        model=body.model,
        n=body.n,
        stops=body.stop_list,
        top_k=body.logprobs,
        tokens=_Tokens(pipeline.engine.tokenizer),
        include_usage=body.include_usage,
    )
    return await _raw(request, pipeline, state, raw, prompts, params, body)


@router.post(
    "/chat/completions",
    response_model=ChatCompletionResponse,
    responses=_STREAMED,
)
async def chat_completions(
    body: ChatCompletionRequest, request: Request, pipeline: PipelineDep, state: StateDep
) -> Response:
    """Answer a conversation in the model's chat format. With ``model: "ragguard"`` the last
    user message is answered from the index, with citations and the guards' decision."""
    arrival = time.perf_counter()
    grounded = _check_model(pipeline, body.model)
    if body.tools:
        raise OpenAIAPIError(400, "tools are not supported", param="tools")
    if body.top_logprobs is not None and not body.logprobs:
        raise OpenAIAPIError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
    max_tokens = (
        body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    )
    messages = [_message(m, i) for i, m in enumerate(body.messages)]
    if grounded:
        users = [m["content"] for m in messages if m["role"] == "user"]
        if not users or not users[-1].strip():
            raise OpenAIAPIError(
                400,
                f"the {GROUNDED_MODEL} model needs a user message (the question)",
                param="messages",
            )
        options = _grounded_options(body, max_tokens, logprobs=body.logprobs)
        job = _GroundedJob(chat=True, model=GROUNDED_MODEL, include_usage=body.include_usage)
        return await _grounded(request, pipeline, state, job, users[-1], options, arrival, body)
    top_k = (body.top_logprobs or 0) if body.logprobs else None
    params = _sampling(body, max_tokens, pipeline.settings.max_tokens, top_k)
    prompt = pipeline.engine.apply_chat_template(messages)
    raw = _RawJob(
        chat=True,
        model=body.model,
        n=body.n,
        stops=body.stop_list,
        top_k=top_k,
        tokens=_Tokens(pipeline.engine.tokenizer),
        include_usage=body.include_usage,
    )
    return await _raw(request, pipeline, state, raw, [prompt], params, body)


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
        max_tokens=max_tokens,
        temperature=body.temperature,
        seed=body.seed,
        abstain_below=body.abstain_below,
        review_below=body.review_below,
        timeout_s=body.timeout_s,
    )


# ========================================================= raw generation
class _Tokens:
    """Token ids as text (cached per request)."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self._cache: dict[int, str] = {}

    def text(self, token_id: int) -> str:
        text = self._cache.get(token_id)
        if text is None:
            if self.tokenizer is None:
                text = f"<{token_id}>"
            else:
                text = str(self.tokenizer.decode([token_id]))
                if not text:
                    text = str(self.tokenizer.convert_ids_to_tokens(token_id))
            self._cache[token_id] = text
        return text


def _logprob(value: float) -> float:
    value = float(value)
    return _MIN_LOGPROB if value != value else max(value, _MIN_LOGPROB)  # NaN, -inf


def _ranked(alternatives: dict[int, float], k: int) -> list[tuple[int, float]]:
    return sorted(alternatives.items(), key=lambda kv: kv[1], reverse=True)[:k]


@dataclass(slots=True)
class _ChoiceState:
    """What a stream has sent of one choice."""

    text: str = ""
    tokens: int = 0
    offset: int = 0
    """Characters of the completion the sent tokens cover (``text_offset``)."""
    finished: bool = False


def _finish_reason(reason: FinishReason | None) -> str | None:
    return None if reason is None else reason.value


@dataclass(slots=True)
class _RawJob:
    """One request for the engine: how its outputs are shaped."""

    chat: bool
    model: str
    n: int
    stops: list[str]
    top_k: int | None
    """Alternatives per token; None: no log-probabilities asked."""
    tokens: _Tokens
    include_usage: bool
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def response_id(self) -> str:
        return ("chatcmpl-" if self.chat else "cmpl-") + self.id

    def logprobs(
        self, out: CompletionOutput, start: int, end: int, offset: int
    ) -> ChatLogprobs | CompletionLogprobs | None:
        """Log-probabilities of tokens ``start:end`` of ``out`` (``offset``: characters before
        them, for ``text_offset``)."""
        if self.top_k is None:
            return None
        ids = out.token_ids[start:end]
        chosen = out.logprobs[start:end]
        tops = (out.top_logprobs or [])[start:end]
        strings = [self.tokens.text(t) for t in ids]
        if self.chat:
            content = []
            for i, (token, lp) in enumerate(zip(strings, chosen, strict=False)):
                alternatives = [
                    TopLogprob(
                        token=(s := self.tokens.text(a)),
                        logprob=_logprob(v),
                        bytes=list(s.encode("utf-8")),
                    )
                    for a, v in (_ranked(tops[i], self.top_k) if i < len(tops) else [])
                ]
                content.append(
                    TokenLogprob(
                        token=token,
                        logprob=_logprob(lp),
                        bytes=list(token.encode("utf-8")),
                        top_logprobs=alternatives,
                    )
                )
            return ChatLogprobs(content=content)
        offsets = []
        for token in strings:
            offsets.append(offset)
            offset += len(token)
        top: list[dict[str, float]] = []
        for i, (token_id, lp) in enumerate(zip(ids, chosen, strict=False)):
            ranked = dict(_ranked(tops[i], self.top_k)) if i < len(tops) else {}
            ranked.setdefault(token_id, lp)  # the chosen token is always listed
            top.append({self.tokens.text(a): _logprob(v) for a, v in ranked.items()})
        return CompletionLogprobs(
            tokens=strings,
            token_logprobs=[_logprob(lp) for lp in chosen],
            top_logprobs=top,
            text_offset=offsets,
        )

    def response(self, finals: list[RequestOutput]) -> BaseModel:
        choices: list[Any] = []
        for p, final in enumerate(finals):
            for out in final.outputs:
                index = p * self.n + out.index
                logprobs = self.logprobs(out, 0, len(out.token_ids), 0)
                reason = _finish_reason(out.finish_reason) or "stop"
                if self.chat:
                    assert logprobs is None or isinstance(logprobs, ChatLogprobs)
                    choices.append(
                        ChatChoice(
                            index=index,
                            message=ChatMessageOut(content=out.text),
                            logprobs=logprobs,
                            finish_reason=reason,
                        )
                    )
                else:
                    assert logprobs is None or isinstance(logprobs, CompletionLogprobs)
                    choices.append(
                        CompletionChoice(
                            index=index, text=out.text, logprobs=logprobs, finish_reason=reason
                        )
                    )
        choices.sort(key=lambda c: c.index)
        usage = _usage(finals)
        if self.chat:
            return ChatCompletionResponse(
                id=self.response_id,
                created=self.created,
                model=self.model,
                choices=choices,
                usage=usage,
            )
        return CompletionResponse(
            id=self.response_id,
            created=self.created,
            model=self.model,
            choices=choices,
            usage=usage,
        )

    def chunk(
        self,
        index: int,
        text: str | None,
        *,
        role: bool = False,
        logprobs: ChatLogprobs | CompletionLogprobs | None = None,
        finish_reason: str | None = None,
    ) -> ServerSentEvent:
        if self.chat:
            assert logprobs is None or isinstance(logprobs, ChatLogprobs)
            delta = Delta(role="assistant" if role else None, content=text)
            choice = ChatChunkChoice(
                index=index, delta=delta, logprobs=logprobs, finish_reason=finish_reason
            )
            return _chunk_event(
                ChatCompletionChunk(
                    id=self.response_id, created=self.created, model=self.model, choices=[choice]
                )
            )
        assert logprobs is None or isinstance(logprobs, CompletionLogprobs)
        text_choice = CompletionChoice(
            index=index, text=text or "", logprobs=logprobs, finish_reason=finish_reason
        )
        return _chunk_event(
            CompletionChunk(
                id=self.response_id, created=self.created, model=self.model, choices=[text_choice]
            )
        )

    def usage_chunk(self, usage: Usage) -> ServerSentEvent:
        chunk: ChatCompletionChunk | CompletionChunk
        if self.chat:
            chunk = ChatCompletionChunk(
                id=self.response_id, created=self.created, model=self.model, choices=[], usage=usage
            )
        else:
            chunk = CompletionChunk(
                id=self.response_id, created=self.created, model=self.model, choices=[], usage=usage
            )
        return _chunk_event(chunk)


def _usage(finals: Sequence[RequestOutput | None]) -> Usage:
    prompt = sum(f.num_prompt_tokens for f in finals if f is not None)
    completion = sum(f.num_completion_tokens for f in finals if f is not None)
    return Usage(
        prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
    )


def _deadline(pipeline: Pipeline, body: GenerationRequest) -> float | None:
    timeout = body.timeout_s or pipeline.settings.request_timeout_s
    return None if timeout is None else asyncio.get_running_loop().time() + timeout


async def _outputs(
    engine: EngineClient,
    prompts: list[str],
    params: SamplingParams,
    request_id: str,
    deadline: float | None,
) -> AsyncGenerator[tuple[int, RequestOutput], None]:
    """Every prompt's outputs as they grow, tagged with the prompt's position. One engine
    request per prompt, all at once (they share the engine's batches); leaving early, or the
    deadline passing, aborts them all."""
    queue: asyncio.Queue[tuple[int, RequestOutput | Exception | None]] = asyncio.Queue()
    tag = uuid.uuid4().hex[:8]  # engine ids stay unique when a caller reuses its request id

    async def pump(position: int, prompt: str) -> None:
        engine_id = f"{request_id}-{tag}" + (f"-{position}" if len(prompts) > 1 else "")
        stream = engine.generate(prompt, params, engine_id)
        try:
            async for output in stream:
                queue.put_nowait((position, output))
            queue.put_nowait((position, None))
        except Exception as exc:
            queue.put_nowait((position, exc))
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()

    tasks = [asyncio.create_task(pump(p, prompt)) for p, prompt in enumerate(prompts)]
    try:
        running = len(tasks)
        while running:
            try:
                async with asyncio.timeout_at(deadline):
                    position, item = await queue.get()
            except TimeoutError as exc:
                raise DeadlineExceededError(
                    "no completion within the deadline; the generation was stopped"
                ) from exc
            if item is None:
                running -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield position, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _finals(
    engine: EngineClient,
    prompts: list[str],
    params: SamplingParams,
    request_id: str,
    deadline: float | None,
) -> list[RequestOutput]:
    finals: list[RequestOutput | None] = [None] * len(prompts)
    async with aclosing(_outputs(engine, prompts, params, request_id, deadline)) as outputs:
        async for position, output in outputs:
            finals[position] = output
    done = [f for f in finals if f is not None and f.finished]
    if len(done) != len(prompts):
        raise EngineUnavailableError("the engine ended a request without a final output")
    return done


async def _raw(
    request: Request,
    pipeline: Pipeline,
    state: ServerState,
    job: _RawJob,
    prompts: list[str],
    params: SamplingParams,
    body: GenerationRequest,
) -> Response:
    request_id: str = request.state.request_id
    deadline = _deadline(pipeline, body)
    if body.stream:
        state.admission.check()  # refuse with a status code while one can still be sent
        stream = _raw_stream(request, pipeline, state, job, prompts, params, deadline)
        return EventSourceResponse(stream, sep="\n")
    async with state.admission.slot():
        finals = await unless_disconnected(
            request, _finals(pipeline.engine, prompts, params, request_id, deadline)
        )
    return _json(job.response(finals))


async def _raw_stream(
    request: Request,
    pipeline: Pipeline,
    state: ServerState,
    job: _RawJob,
    prompts: list[str],
    params: SamplingParams,
    deadline: float | None,
) -> AsyncIterator[ServerSentEvent]:
    """Chunks of text as it is generated; a client that leaves cancels this generator, which
    aborts the generation."""
    request_id: str = request.state.request_id
    sent = [_ChoiceState() for _ in range(len(prompts) * job.n)]
    finals: list[RequestOutput | None] = [None] * len(prompts)
    try:
        async with state.admission.slot(checked=True):
            if job.chat:
                for index in range(job.n):
                    yield job.chunk(index, "", role=True)
            generated = _outputs(pipeline.engine, prompts, params, request_id, deadline)
            async with aclosing(generated) as outputs:  # closed (aborted) when we are
                async for position, output in outputs:
                    finals[position] = output
                    for out in output.outputs:
                        index = position * job.n + out.index
                        event = _advance(job, sent[index], index, out)
                        if event is not None:
                            yield event
            if job.include_usage:
                yield job.usage_chunk(_usage(finals))
    except Exception as exc:
        yield _error_event(request, exc)
    yield _done()


def _advance(
    job: _RawJob, sent: _ChoiceState, index: int, out: CompletionOutput
) -> ServerSentEvent | None:
    """The chunk that brings a client's copy of one choice up to ``out``, if any."""
    if sent.finished:
        return None
    finished = out.finish_reason is not None
    text = out.text if finished else streamable_text(out.text, job.stops)
    delta = ""
    if len(text) > len(sent.text) and text.startswith(sent.text):
        delta = text[len(sent.text) :]
        sent.text = text
    start, end = sent.tokens, len(out.token_ids)
    if not delta and start >= end and not finished:
        return None
    logprobs = job.logprobs(out, start, end, sent.offset) if end > start else None
    if end > start:
        sent.offset += sum(len(job.tokens.text(t)) for t in out.token_ids[start:end])
    sent.tokens = end
    sent.finished = finished
    reason = (_finish_reason(out.finish_reason) or "stop") if finished else None
    return job.chunk(index, delta, logprobs=logprobs, finish_reason=reason)


# ========================================================= grounded answers
@dataclass(slots=True)
class _GroundedJob:
    chat: bool
    model: str
    include_usage: bool
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def response_id(self) -> str:
        return ("chatcmpl-" if self.chat else "cmpl-") + self.id

    def as_raw(self) -> _RawJob:
        """The shapes of a raw job's chunks, for the grounded stream's deltas."""
        return _RawJob(
            chat=self.chat,
            model=self.model,
            n=1,
            stops=[],
            top_k=None,
            tokens=_Tokens(None),
            include_usage=self.include_usage,
            id=self.id,
            created=self.created,
        )


def _grounding(result: Result) -> Grounding:
    return Grounding.model_validate(AskResponse.from_result(result).model_dump())


def _grounded_usage(result: Result) -> Usage:
    u = result.usage
    return Usage(
        prompt_tokens=u.prompt_tokens,
        completion_tokens=u.completion_tokens,
        total_tokens=u.prompt_tokens + u.completion_tokens,
    )


def _grounded_finish(result: Result) -> str:
    if not result.abstained and result.samples and result.samples[0].finish_reason == "length":
        return "length"
    return "stop"


async def _grounded(
    request: Request,
    pipeline: Pipeline,
    state: ServerState,
    job: _GroundedJob,
    question: str,
    options: AskOptions,
    arrival: float,
    body: GenerationRequest,
) -> Response:
    request_id: str = request.state.request_id
    if pipeline.checker is not None:
        pipeline.checker.policy_for(options)  # bad thresholds: a 400 now, not a stream error
    if body.stream:
        state.admission.check()
        stream = _grounded_stream(request, pipeline, state, job, question, options, arrival)
        return EventSourceResponse(stream, sep="\n")
    async with state.admission.slot() as waited_s:
        events = state.telemetry.track(
            pipeline.stream(question, options, request_id=request_id), arrival, waited_s
        )
        result = await unless_disconnected(request, result_of(events))
    grounding = _grounding(result)
    reason = _grounded_finish(result)
    usage = _grounded_usage(result)
    response: BaseModel
    if job.chat:
        response = ChatCompletionResponse(
            id=job.response_id,
            created=job.created,
            model=job.model,
            choices=[
                ChatChoice(
                    index=0, message=ChatMessageOut(content=result.answer), finish_reason=reason
                )
            ],
            usage=usage,
            ragguard=grounding,
        )
    else:
        response = CompletionResponse(
            id=job.response_id,
            created=job.created,
            model=job.model,
            choices=[CompletionChoice(index=0, text=result.answer, finish_reason=reason)],
            usage=usage,
            ragguard=grounding,
        )
    return _json(response)


async def _grounded_stream(
    request: Request,
    pipeline: Pipeline,
    state: ServerState,
    job: _GroundedJob,
    question: str,
    options: AskOptions,
    arrival: float,
) -> AsyncIterator[ServerSentEvent]:
    """The answer's text as generated, then a last chunk with the finish reason and the
    ``ragguard`` field (whose ``answer`` is authoritative: a withheld answer is replaced)."""
    request_id: str = request.state.request_id
    shape = job.as_raw()
    try:
        async with state.admission.slot(checked=True) as waited_s:
            if job.chat:
                yield shape.chunk(0, "", role=True)
            events = pipeline.stream(question, options, request_id=request_id)
            streamed = ""
            async for event in state.telemetry.track(events, arrival, waited_s):
                if isinstance(event, TokenEvent) and event.text:
                    streamed += event.text
                    yield shape.chunk(0, event.text)
                elif isinstance(event, ResultEvent):
                    result = event.result
                    rest = ""
                    if result.answer.startswith(streamed):  # e.g. nothing was generated
                        rest = result.answer[len(streamed) :]
                    yield _final_grounded_chunk(job, result, rest)
                    if job.include_usage:
                        yield shape.usage_chunk(_grounded_usage(result))
    except Exception as exc:
        yield _error_event(request, exc)
    yield _done()


def _final_grounded_chunk(job: _GroundedJob, result: Result, text: str) -> ServerSentEvent:
    reason = _grounded_finish(result)
    grounding = _grounding(result)
    chunk: ChatCompletionChunk | CompletionChunk
    if job.chat:
        choice = ChatChunkChoice(index=0, delta=Delta(content=text), finish_reason=reason)
        chunk = ChatCompletionChunk(
            id=job.response_id,
            created=job.created,
            model=job.model,
            choices=[choice],
            ragguard=grounding,
        )
    else:
        text_choice = CompletionChoice(index=0, text=text, finish_reason=reason)
        chunk = CompletionChunk(
            id=job.response_id,
            created=job.created,
            model=job.model,
            choices=[text_choice],
            ragguard=grounding,
        )
    return _chunk_event(chunk)


# ============================================================ serialization
def _dump(model: BaseModel) -> dict[str, Any]:
    data = model.model_dump(mode="json")
    if data.get("ragguard", 0) is None:
        del data["ragguard"]  # only grounded answers carry it
    return data


def _json(model: BaseModel) -> JSONResponse:
    return JSONResponse(_dump(model))


def _event(data: dict[str, Any]) -> ServerSentEvent:
    return ServerSentEvent(json.dumps(data, separators=(",", ":")), sep="\n")


def _chunk_event(chunk: BaseModel) -> ServerSentEvent:
    data = _dump(chunk)
    for choice in data.get("choices", []):
        delta = choice.get("delta")
        if isinstance(delta, dict):  # OpenAI sends only the delta's fields that are set
            choice["delta"] = {k: v for k, v in delta.items() if v is not None}
    return _event(data)


def _done() -> ServerSentEvent:
    return ServerSentEvent("[DONE]", sep="\n")
