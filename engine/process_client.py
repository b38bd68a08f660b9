"""``ProcessEngine``: our engine in a process of its own, behind the ``EngineClient`` interface.

In one process, the engine's stepping thread holds the interpreter lock for most of every step
(the Python between kernels of an eager forward), so the server's own work (health checks,
HTTP, retrieval, the guards) waits behind it. Here the engine runs in a child process (spawned:
CUDA and forked torch threads do not mix) that owns the model and the KV cache; the parent keeps
the tokenizer, so prompts are tokenised and checked against the context window before they are
sent, and a prompt that does not fit fails at once, as it does in process.

Parent and child talk over one pipe:

- parent to child: ``("add", request_id, prompt_ids, params)``, ``("abort", request_id)``,
  ``("shutdown",)``;
- child to parent: ``("ready", info)`` once the model is loaded (or ``("load_failed", error)``),
  then after every step ``("step", outputs, stats)``, ``("rejected", request_id, error)`` for a
  request the engine refused, and ``("failed", error)`` if a step raised (the child then exits).

A reader thread in the parent routes each output to the asyncio queue of the request's stream.
If the child dies, every waiting stream gets ``EngineUnavailableError`` and ``check_health``
raises.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from engine.client import EngineClient
from engine.config import EngineConfig
from engine.errors import EngineUnavailableError
from engine.outputs import RequestOutput
from engine.prompts import Prompt, PromptFacade, PromptTokenizer
from engine.sampling_params import SamplingParams
from engine.stats import EngineStats
from engine.streams import OutputStreams

logger = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 600.0
"""How long the parent waits for the child to load the model (a first GGUF conversion included)."""


@dataclass(frozen=True, slots=True)
class _EngineInfo:
    model_name: str
    max_model_len: int
    tokenizer: Any
    stats: EngineStats
    """As loaded, before any step: the KV pool's size, nothing running."""


class ProcessEngine(PromptFacade):
    """Our engine stepped in a child process; ``generate``, ``abort``, ``stats`` and
    ``check_health`` as ``AsyncEngine`` has them."""

    def __init__(self, config: EngineConfig | None = None, *, startup_timeout_s: float = 0.0):
        config = config or EngineConfig()
        context = multiprocessing.get_context("spawn")
        self._conn, child_conn = context.Pipe(duplex=True)
        self._process = context.Process(
            target=_child_main, args=(child_conn, config), name="ragguard-engine", daemon=True
        )
        self._process.start()
        child_conn.close()
        info = self._await_ready(startup_timeout_s or STARTUP_TIMEOUT_S)
        self._info = info
        self.prompts = PromptTokenizer(info.tokenizer, info.max_model_len)
        self._streams = OutputStreams()
        self._send_lock = threading.Lock()
        self._stats: EngineStats | None = info.stats
        self._error: BaseException | None = None
        self._stopped = False
        self._reader = threading.Thread(
            target=self._read, name="ragguard-engine-reader", daemon=True
        )
        self._reader.start()

    def _await_ready(self, timeout_s: float) -> _EngineInfo:
        """The child's ``ready`` message, or its load error raised here."""
        try:
            if not self._conn.poll(timeout_s):
                raise EngineUnavailableError(f"the engine process did not start in {timeout_s} s")
            message = self._conn.recv()
        except (EOFError, OSError) as exc:
            self._process.join(timeout=5)
            raise EngineUnavailableError(
                f"the engine process exited while loading (exit code {self._process.exitcode})"
            ) from exc
        except BaseException:
            self._process.kill()
            raise
        if message[0] == "load_failed":
            self._process.join(timeout=5)
            raise message[1]
        kind, info = message
        assert kind == "ready", kind
        return info

    # ------------------------------------------------------------- interface
    @property
    def model_name(self) -> str:
        return self._info.model_name

    async def generate(
        self, prompt: Prompt, params: SamplingParams, request_id: str | None = None
    ) -> AsyncIterator[RequestOutput]:
        """Stream the request's outputs as the child's steps add tokens."""
        self.check_health()
        request_id = request_id or uuid.uuid4().hex
        ids = self.prompts.prompt_ids(prompt, params)  # a prompt that does not fit fails here
        self._streams.open(request_id)  # a duplicate id raises here
        try:
            self._send(("add", request_id, ids, params))
        except BaseException:
            self._streams.close(request_id)
            raise
        # aclosing: leaving this stream early closes the inner one at once (abort, free)
        async with contextlib.aclosing(self._streams.read(request_id, self.abort)) as outputs:
            async for output in outputs:
                if isinstance(prompt, str):
                    output.prompt = prompt
                yield output

    def abort(self, request_id: str) -> None:
        with contextlib.suppress(EngineUnavailableError):
            self._send(("abort", request_id))

    def stats(self) -> EngineStats | None:
        """The counters as of the child's latest step (as loaded before the first)."""
        return self._stats

    @property
    def pid(self) -> int | None:
        """The engine process's id."""
        return self._process.pid

    def check_health(self) -> None:
        if self._stopped:
            raise EngineUnavailableError("the engine is shut down")
        if self._error is not None:
            raise EngineUnavailableError(f"the engine process failed: {self._error!r}") from (
                self._error
            )
        if not self._process.is_alive():
            raise EngineUnavailableError(
                f"the engine process exited (exit code {self._process.exitcode})"
            )

    def shutdown(self) -> None:
        """Stop the child; callers still waiting get ``EngineUnavailableError``."""
        if self._stopped:
            return
        self._stopped = True
        with contextlib.suppress(EngineUnavailableError):
            self._send(("shutdown",))
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(timeout=5)
        self._streams.fail_all(EngineUnavailableError("the engine is shut down"))
        self._conn.close()

    # -------------------------------------------------------------- plumbing
    def _send(self, message: tuple[Any, ...]) -> None:
        try:
            with self._send_lock:
                self._conn.send(message)
        except (OSError, ValueError) as exc:  # a closed pipe: the child is gone
            raise EngineUnavailableError("the engine process is gone") from exc

    def _read(self) -> None:
        """Route the child's messages until the pipe closes."""
        while True:
            try:
                message = self._conn.recv()
            except (EOFError, OSError):
                if not self._stopped:
                    self._error = EngineUnavailableError("the engine process exited")
                    logger.error("the engine process exited (code %s)", self._process.exitcode)
                self._streams.fail_all(EngineUnavailableError("the engine process exited"))
                return
            kind = message[0]
            if kind == "step":
                _, outputs, stats = message
                self._stats = stats
                for output in outputs:
                    self._streams.deliver(output.request_id, output)
            elif kind == "rejected":
                self._streams.deliver(message[1], message[2])
            elif kind == "failed":
                self._error = message[1]
                self._streams.fail_all(
                    EngineUnavailableError(f"the engine step failed: {message[1]!r}")
                )


# ----------------------------------------------------------------- the child
def _child_main(conn: Connection, config: EngineConfig) -> None:
    """Load the engine, then serve the parent's requests until told to stop or orphaned."""
    from engine.llm_engine import LLMEngine

    if config.process_nice > 0:
        os.nice(config.process_nice)  # the server's threads first when the cores are busy
    try:
        engine = LLMEngine(config)
    except BaseException as exc:
        conn.send(("load_failed", _picklable(exc)))
        return
    info = _EngineInfo(engine.model_name, engine.max_model_len, engine.tokenizer, engine.stats())
    conn.send(("ready", info))
    _ChildLoop(engine, conn).run()


class _ChildLoop:
    def __init__(self, engine: Any, conn: Connection):
        self.engine = engine
        self.conn = conn
        self.outbox: list[RequestOutput] = []
        self.running = True

    def run(self) -> None:
        engine = self.engine
        try:
            while self.running:
                if not engine.has_unfinished_requests():
                    self._receive(block=True)
                    self._gather_arrivals()
                else:
                    self._receive(block=False)
                if not self.running:
                    break
                if engine.has_unfinished_requests():
                    try:
                        engine.step()  # outputs land in the outbox through their sinks
                    except BaseException as exc:
                        logger.exception("engine step failed")
                        self.conn.send(("failed", _picklable(exc)))
                        return
                self.conn.send(("step", self.outbox, engine.stats()))
                self.outbox = []
        except (EOFError, OSError, BrokenPipeError):
            return  # the parent is gone

    def _receive(self, *, block: bool) -> None:
        """Handle every waiting message (after waiting for the first one if ``block``)."""
        if block:
            self._handle(self.conn.recv())
        while self.running and self.conn.poll(0):
            self._handle(self.conn.recv())

    def _gather_arrivals(self) -> None:
        """Give requests that arrive together a moment to join the first step."""
        config = self.engine.config
        deadline = time.perf_counter() + config.max_batch_wait_ms / 1000
        while self.running and len(self.engine.scheduler.waiting) < config.max_num_seqs:
            left = deadline - time.perf_counter()
            if left <= 0 or not self.conn.poll(left):
                return
            self._receive(block=False)

    def _collect(self, output: RequestOutput) -> None:
        """Sink of every request: its outputs go out with the step's message."""
        self.outbox.append(output)

    def _handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "add":
            _, request_id, ids, params = message
            try:
                self.engine.add_request(ids, params, request_id, sink=self._collect)
            except Exception as exc:
                self.conn.send(("rejected", request_id, _picklable(exc)))
        elif kind == "abort":
            self.engine.abort(message[1])
        elif kind == "shutdown":
            self.running = False


def _picklable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a RuntimeError that says what it was."""
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def build_client(config: EngineConfig, options: object | None = None) -> EngineClient:
    """The ``engine-process`` backend (it takes no options)."""
    return ProcessEngine(config)
