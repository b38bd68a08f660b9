"""A remote generator: any server with OpenAI's ``/v1/completions`` (vLLM, TGI, llama.cpp's
server, another ragguard) behind the engine-client seam.

The pipeline and the guards run unchanged over it: each request is one streamed completion
(``n`` samples, log-probabilities of the chosen and the top tokens, stop strings, seed,
penalties), turned back into ``RequestOutput``s as the chunks arrive. Only the OpenAI API is
used: nothing vLLM-specific, except vLLM's sampling extensions (``top_k``, ``min_p``,
``repetition_penalty``, ``stop_token_ids``, ``ignore_eos``), sent only when a request sets them.

The prompt is formatted and budgeted with the model's tokenizer when a local copy is configured
(``RemoteConfig.tokenizer``). Without one, chat prompts use the ChatML template and token counts
are an estimate (one token per three characters, erring long); this is logged once.

Token ids: the API returns tokens as text. With a local tokenizer a token that encodes to one id
gets that id; any other gets a stable negative id derived from its text, so stop checks (which
look for repeated ids) and counts still work.

Starting together: the server may still be loading when the client is made. The client asks
its model list until it answers (``engine.remote_link``, up to ``startup_timeout_s``): blocking
in the constructor, or, with ``connect_in_background`` (the API server), in a thread while the
client's ``check_health`` and the facts it needs from the server (model name, context length when
not configured) raise ``EngineStartingError``. A request that later finds the server down marks
it so, and the probe reconnects once it answers again (a restart).

Errors: the connection failing, a timeout, 5xx or 429 before the first chunk are retried with
exponential backoff (a 429's ``Retry-After`` is honoured up to 30 s); then a 429 raises
``RemoteBusyError``, the rest ``EngineUnavailableError``. A 4xx is the request's fault:
``RemoteRequestError``. Nothing is retried once a completion has started to stream.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
import zlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

from engine.client import EngineClient
from engine.config import EngineConfig
from engine.errors import EngineStartingError, EngineUnavailableError, RemoteRequestError
from engine.outputs import CompletionOutput, FinishReason, RequestOutput, RequestTiming
from engine.prompts import Prompt, PromptTokenizer
from engine.remote_config import RemoteConfig
from engine.remote_http import RemoteUnreachableError, RetryingStream, sse_data
from engine.remote_link import LinkState, RemoteLink
from engine.sampling_params import SamplingParams

logger = logging.getLogger(__name__)

CHARS_PER_TOKEN_ESTIMATE = 3
"""Without a tokenizer, a prompt of c characters counts as ceil(c / 3) tokens (English text is
about four characters a token: the estimate errs towards prompts that fit)."""
DEFAULT_MAX_MODEL_LEN = 2048


def _load_tokenizer(source: str, cache_dir: Any) -> Any:
    from engine.model_loader import load_config_and_tokenizer, resolve_model

    _, _, tokenizer, _ = load_config_and_tokenizer(
        resolve_model(source, cache_dir=cache_dir), cache_dir
    )
    return tokenizer


def chatml(messages: list[dict[str, str]]) -> str:
    """The ChatML rendering of ``messages``, ready for the assistant's turn."""
    turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return turns + "<|im_start|>assistant\n"


class RemoteClient:
    """``EngineClient`` over a remote OpenAI-compatible ``/v1/completions``."""

    def __init__(self, config: RemoteConfig, *, cache_dir: Any = None, max_model_len: int | None):
        self.config = config
        tokenizer = (
            _load_tokenizer(config.tokenizer, cache_dir) if config.tokenizer is not None else None
        )
        if tokenizer is None:
            logger.warning(
                "remote generator without a local tokenizer: prompts use the ChatML template "
                "and their token counts are estimated (1 token per %d characters)",
                CHARS_PER_TOKEN_ESTIMATE,
            )
        self._model = config.model
        self._max_model_len = config.max_model_len or max_model_len
        context = self._max_model_len or DEFAULT_MAX_MODEL_LEN  # until the card says otherwise
        self.prompts = PromptTokenizer(tokenizer, context) if tokenizer is not None else None
        self._token_ids: dict[str, int] = {}
        self._running: dict[str, asyncio.Event] = {}
        self._stopped = False
        self._link = RemoteLink(config)
        needs_card = self._model is None or self._max_model_len is None
        if config.connect_in_background:
            self._link.start()
        elif needs_card:
            try:
                self._link.wait()
            except BaseException:
                self._link.close()
                raise
            self._resolve()
        else:
            self._link.assume_up()

    # ------------------------------------------------------------ the model
    def _resolve(self) -> None:
        """Take the model name and context length from the server's model cards, once it has
        answered (raises ``EngineStartingError`` until then)."""
        if self._model is not None and self._max_model_len is not None:
            return
        cards = self._link.cards
        if cards is None:
            self._link.check()
            raise EngineStartingError(f"waiting for the remote generator at {self.config.base_url}")
        card = next(
            (c for c in cards if self.config.model is None or c.get("id") == self.config.model),
            None,
        )
        if card is None:  # llama.cpp's server, for one, serves any name it is asked for
            logger.warning(
                "the remote generator does not list %r (it lists %s); asking for it anyway",
                self.config.model,
                [c.get("id") for c in cards],
            )
            card = {}
        model = self._model or str(card["id"])
        reported = card.get("max_model_len")
        fits = isinstance(reported, int) and reported > 0
        context = self._max_model_len or (reported if fits else None)
        if context is None:
            logger.warning(
                "the remote server does not report its context length: assuming %d tokens",
                DEFAULT_MAX_MODEL_LEN,
            )
            context = DEFAULT_MAX_MODEL_LEN
        if self.prompts is not None:
            self.prompts.max_model_len = context
        self._model, self._max_model_len = model, context

    @property
    def model_name(self) -> str:
        if self._model is None:
            self._resolve()
        assert self._model is not None
        return self._model

    @property
    def max_model_len(self) -> int:
        if self._max_model_len is None:
            self._resolve()
        assert self._max_model_len is not None
        return self._max_model_len

    @property
    def link_state(self) -> LinkState:
        """Whether the server answers: connecting, up, down (reconnecting) or failed."""
        return self._link.state

    @property
    def tokenizer(self) -> Any:
        return None if self.prompts is None else self.prompts.tokenizer

    def count_tokens(self, prompt: str) -> int:
        if self.prompts is None:
            return -(-len(prompt) // CHARS_PER_TOKEN_ESTIMATE)
        return self.prompts.count_tokens(prompt)

    def apply_chat_template(self, messages: list[dict[str, str]]) -> str:
        if self.prompts is None or not getattr(self.prompts.tokenizer, "chat_template", None):
            return chatml(messages)
        return self.prompts.apply_chat_template(messages)

    def token_id(self, token: str) -> int:
        """The id of a token given as text (negative when the local tokenizer cannot tell)."""
        known = self._token_ids.get(token)
        if known is None:
            ids = (
                self.prompts.tokenizer.encode(token, add_special_tokens=False)
                if self.prompts is not None
                else []
            )
            known = ids[0] if len(ids) == 1 else -1 - zlib.crc32(token.encode("utf-8"))
            self._token_ids[token] = known
        return known

    # ------------------------------------------------------------ requests
    def _body(self, prompt: str, params: SamplingParams) -> dict[str, Any]:
        if params.use_beam_search:
            raise RemoteRequestError("beam search is not available on a remote generator", 400)
        body: dict[str, Any] = {
            "model": self.model_name,
            "prompt": prompt,
            "n": params.n,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "logprobs": params.logprobs or 0,
        }
        optional = {
            "seed": params.seed,
            "stop": params.stop or None,
            "presence_penalty": params.presence_penalty or None,
            "frequency_penalty": params.frequency_penalty or None,
            # vLLM's extensions, only when asked for (a strict server refuses unknown fields).
            "top_k": params.top_k or None,
            "min_p": params.min_p or None,
            "repetition_penalty": params.repetition_penalty
            if params.repetition_penalty != 1.0
            else None,
            "stop_token_ids": params.stop_token_ids or None,
            "ignore_eos": params.ignore_eos or None,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        return body

    async def generate(
        self, prompt: Prompt, params: SamplingParams, request_id: str | None = None
    ) -> AsyncIterator[RequestOutput]:
        self.check_health()
        if not isinstance(prompt, str):
            if self.prompts is None:
                raise RemoteRequestError("token-id prompts need a local tokenizer", 400)
            prompt = str(self.prompts.tokenizer.decode(prompt))
        request_id = request_id or uuid.uuid4().hex
        if request_id in self._running:
            raise ValueError(f"request id {request_id!r} is already in use")
        aborted = self._running[request_id] = asyncio.Event()
        body = self._body(prompt, params)
        timing = RequestTiming(arrival_time=time.perf_counter())
        outputs = [CompletionOutput(i, "", [], []) for i in range(params.n)]
        result = RequestOutput(request_id, prompt, [], outputs, False, timing)
        timeout = httpx.Timeout(self.config.timeout_s, connect=min(30.0, self.config.timeout_s))
        http = httpx.AsyncClient(
            base_url=self.config.base_url.rstrip("/") + "/",
            headers=self.config.headers,
            timeout=timeout,
        )
        try:
            async with http, RetryingStream(self.config, http, body) as response:
                self._link.report_up()
                timing.first_scheduled_time = time.perf_counter()
                async for output in self._read(response, result, params, aborted):
                    yield output
        except RemoteUnreachableError as exc:
            self._link.report_down(str(exc))  # the probe finds out when it is back
            raise
        finally:
            self._running.pop(request_id, None)

    async def _read(
        self,
        response: httpx.Response,
        result: RequestOutput,
        params: SamplingParams,
        aborted: asyncio.Event,
    ) -> AsyncIterator[RequestOutput]:
        timing = result.timing
        stopped_here = False  # a completion ended by our stop check, not by the server
        try:
            async for data in sse_data(response.aiter_lines()):
                if aborted.is_set():
                    break
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if isinstance(chunk.get("error"), dict):  # an error mid-stream
                    raise EngineUnavailableError(
                        f"the remote generator failed: {chunk['error'].get('message')}"
                    )
                usage = chunk.get("usage")
                if usage:
                    result.num_reported_prompt_tokens = int(usage.get("prompt_tokens", 0))
                    details = usage.get("prompt_tokens_details") or {}
                    result.num_cached_tokens = int(details.get("cached_tokens") or 0)
                changed = False
                for choice in chunk.get("choices") or []:
                    out = result.outputs[int(choice["index"])]
                    changed |= self._apply(out, choice, params)
                    stopped_here |= out.finished and choice.get("finish_reason") is None
                if changed:
                    now = time.perf_counter()
                    timing.first_token_time = timing.first_token_time or now
                    timing.token_times.append(now)
                    if all(o.finished for o in result.outputs):
                        if usage or stopped_here:
                            # Our stop check ended a completion: closing the stream aborts it
                            # on the server. Otherwise the server's usage chunk comes next.
                            break
                        continue
                    yield result
        except httpx.HTTPError as exc:
            raise RemoteUnreachableError(f"the remote generator's stream broke: {exc}") from exc
        for output in result.outputs:
            if output.finish_reason is None:
                output.finish_reason = FinishReason.ABORT if aborted.is_set() else FinishReason.STOP
        result.finished = True
        timing.finished_time = time.perf_counter()
        if self.prompts is not None and result.prompt is not None:
            result.prompt_token_ids = self.prompts.encode(result.prompt)
        yield result

    def _apply(self, out: CompletionOutput, choice: dict[str, Any], params: SamplingParams) -> bool:
        """Add one chunk's text and tokens to ``out``; whether anything new arrived."""
        if out.finished:  # our stop check ended it; the server's rest is dropped
            return False
        text = choice.get("text") or ""
        logprobs = choice.get("logprobs") or {}
        tokens = logprobs.get("tokens") or []
        out.text += text
        for i, token in enumerate(tokens):
            out.token_ids.append(self.token_id(token))
            value = (logprobs.get("token_logprobs") or [])[i]
            out.logprobs.append(float("nan") if value is None else float(value))
            if params.logprobs:
                tops = logprobs.get("top_logprobs") or []
                top = tops[i] if i < len(tops) and tops[i] else {}
                out.top_logprobs = out.top_logprobs or []
                out.top_logprobs.append({self.token_id(t): float(v) for t, v in top.items()})
        if not tokens and text:  # a server that sends no logprobs: one pseudo-token per chunk
            out.token_ids.append(self.token_id(text))
            out.logprobs.append(float("nan"))
        reason = choice.get("finish_reason")
        if reason is not None:
            out.finish_reason = FinishReason.LENGTH if reason == "length" else FinishReason.STOP
            out.stop_reason = choice.get("stop_reason")
        elif params.stop_check is not None and (why := params.stop_check(out.token_ids)):
            out.finish_reason, out.stop_reason = FinishReason.STOP, why
        return bool(text or tokens or reason)

    def abort(self, request_id: str) -> None:
        event = self._running.get(request_id)
        if event is not None:
            event.set()

    def stats(self) -> None:
        return None

    def check_health(self) -> None:
        """Raise unless requests can be sent: ``EngineStartingError`` while the server is still
        starting or reconnecting, ``EngineUnavailableError`` once it will not come up."""
        if self._stopped:
            raise EngineUnavailableError("the remote generator client is shut down")
        self._link.check()

    def shutdown(self) -> None:
        self._stopped = True
        self._link.close()
        for event in list(self._running.values()):
            event.set()


def build_client(config: EngineConfig, options: object | None = None) -> EngineClient:
    """The ``openai`` backend: ``options`` is the server's ``RemoteConfig``."""
    if not isinstance(options, RemoteConfig):
        raise ValueError("the openai backend needs a remote server (a RemoteConfig as options)")
    return RemoteClient(options, cache_dir=config.cache_dir, max_model_len=config.max_model_len)
