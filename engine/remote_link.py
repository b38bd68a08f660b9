"""Whether a remote generator answers, and the probe that finds out.

Servers start together in real deployments, so a remote generator that is still loading its model
(connection refused, 503 from its model list) is not dead: ``RemoteLink`` polls its
``GET /models`` in a thread of its own, with exponential backoff capped at
``MAX_PROBE_INTERVAL_S``, until it answers or ``RemoteConfig.startup_timeout_s`` has passed. Once
it has answered, a request that cannot reach it marks it down and the probe starts again, without
a deadline, until it answers again (a restart). Meanwhile ``check`` raises ``EngineStartingError``
(worth retrying), and after the startup deadline or an answer that will not change by waiting
(401, 403, 404) ``EngineUnavailableError``.

States: ``connecting`` (never answered yet), ``up``, ``down`` (answered once, unreachable now),
``failed`` (for good).
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from typing import Any

import httpx

from engine.errors import EngineStartingError, EngineUnavailableError
from engine.remote_config import RemoteConfig

logger = logging.getLogger(__name__)

MAX_PROBE_INTERVAL_S = 5.0
"""The probe's backoff stops doubling here: a restarted server is found within this."""
PROBE_TIMEOUT_S = 10.0
PERMANENT_STATUSES = frozenset({401, 403, 404})
"""A model list answering these will not answer otherwise by waiting: a wrong key or URL."""
REPEAT_WARNING_S = 30.0


class LinkState(enum.StrEnum):
    CONNECTING = "connecting"
    UP = "up"
    DOWN = "down"
    FAILED = "failed"


class _Permanent(Exception):
    """An answer that waiting will not change."""


def fetch_model_cards(config: RemoteConfig) -> list[dict[str, Any]]:
    """The server's model cards, from one ``GET /models``. Raises ``_Permanent`` for an answer
    that waiting will not change; anything else that goes wrong raises ``httpx.HTTPError`` or
    ``ValueError`` (worth retrying)."""
    url = f"{config.base_url.rstrip('/')}/models"
    response = httpx.get(url, headers=config.headers, timeout=PROBE_TIMEOUT_S)
    if response.status_code >= 400:
        message = f"the model list answered {response.status_code}: {response.text[:200]}"
        if response.status_code in PERMANENT_STATUSES:
            raise _Permanent(message)
        raise ValueError(message)
    try:
        cards = response.json().get("data", [])
    except (ValueError, AttributeError) as exc:
        raise ValueError(f"the model list is not OpenAI's: {response.text[:200]}") from exc
    return [card for card in cards if isinstance(card, dict)]


class RemoteLink:
    """The state of the connection to one remote generator, kept by a probe thread."""

    def __init__(self, config: RemoteConfig):
        self.config = config
        self.cards: list[dict[str, Any]] | None = None
        """The model cards of the first answer; None until the server has answered."""
        self._state = LinkState.CONNECTING
        self._error = "no answer yet"
        self._since = time.monotonic()
        self._changed = threading.Condition()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ what callers see
    @property
    def state(self) -> LinkState:
        return self._state

    def check(self) -> None:
        """Raise unless the server is up: ``EngineStartingError`` while it may still come up,
        ``EngineUnavailableError`` once it will not."""
        state, error, since = self._state, self._error, self._since
        if state is LinkState.UP:
            return
        where = self.config.base_url
        if state is LinkState.FAILED:
            raise EngineUnavailableError(f"the remote generator at {where} is unavailable: {error}")
        waited = time.monotonic() - since
        what = "still starting" if state is LinkState.CONNECTING else "unreachable"
        raise EngineStartingError(
            f"waiting for the remote generator at {where} ({what} for {waited:.0f} s): {error}",
            retry_after_s=min(MAX_PROBE_INTERVAL_S, max(1.0, waited)),
        )

    def wait(self, timeout_s: float | None = None) -> None:
        """Block until the server is up (returns) or failed (raises ``EngineUnavailableError``),
        or ``timeout_s`` has passed (raises ``EngineStartingError``)."""
        self.start()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._changed:
            while self._state not in (LinkState.UP, LinkState.FAILED):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._changed.wait(left)
        self.check()

    # ------------------------------------------------------------ what requests report
    def assume_up(self) -> None:
        """Nothing is needed from the server before the first request: count it as up until a
        request finds otherwise."""
        self._set(LinkState.UP, "")

    def report_up(self) -> None:
        """A request got an answer: the server is up."""
        if self._state is not LinkState.UP and self._state is not LinkState.FAILED:
            self._set(LinkState.UP, "")
            logger.info("the remote generator at %s answers again", self.config.base_url)

    def report_down(self, error: str) -> None:
        """A request could not reach the server: probe until it answers again."""
        if self._state is LinkState.UP:
            self._set(LinkState.DOWN, error)
            where = self.config.base_url
            logger.warning("the remote generator at %s went down (%s); reconnecting", where, error)
            self.start()
            self._wake.set()

    # ------------------------------------------------------------ the probe
    def start(self) -> None:
        """Start the probe thread (once); it probes at once unless the server is up."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="ragguard-remote-link", daemon=True
            )
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        with self._changed:
            self._changed.notify_all()

    def _set(self, state: LinkState, error: str) -> None:
        with self._changed:
            if state is not self._state:
                self._since = time.monotonic()
            self._state, self._error = state, error
            self._changed.notify_all()

    def _run(self) -> None:
        delay = max(self.config.backoff_s, 0.05)
        warned_at = -REPEAT_WARNING_S
        while not self._stop.is_set():
            state = self._state
            if state in (LinkState.UP, LinkState.FAILED):
                self._wake.wait()
                self._wake.clear()
                delay = max(self.config.backoff_s, 0.05)
                continue
            try:
                cards = fetch_model_cards(self.config)
                if not cards and self.config.model is None:
                    raise ValueError("the server lists no model yet")
            except _Permanent as exc:
                self._set(LinkState.FAILED, str(exc))
                logger.error("the remote generator at %s: %s", self.config.base_url, exc)
                continue
            except (httpx.HTTPError, ValueError) as exc:
                error = str(exc) or type(exc).__name__
                waited = time.monotonic() - self._since
                if state is LinkState.CONNECTING and waited > self.config.startup_timeout_s:
                    self._set(
                        LinkState.FAILED,
                        f"it did not come up within {self.config.startup_timeout_s:g} s "
                        f"(RAGGUARD_GENERATOR_STARTUP_TIMEOUT_S); last: {error}",
                    )
                    logger.error("the remote generator at %s: %s", self.config.base_url, error)
                    continue
                with self._changed:
                    self._error = error
                now = time.monotonic()
                if now - warned_at >= REPEAT_WARNING_S:
                    warned_at = now
                    logger.warning(
                        "waiting for the remote generator at %s (%.0f s so far): %s",
                        self.config.base_url,
                        waited,
                        error,
                    )
                self._stop.wait(delay)
                delay = min(delay * 2, MAX_PROBE_INTERVAL_S)
                continue
            if self.cards is None:
                self.cards = cards
            self._set(LinkState.UP, "")
            if state is LinkState.DOWN:
                logger.info("the remote generator at %s answers again", self.config.base_url)
