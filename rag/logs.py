"""Structured logs: one JSON object per line, and the fields a request's stages note for its log.

The server's request log (``rag.server.request_log``) opens a ``collecting()`` scope per request;
the stages call ``note(...)`` with what they know (index, sampling parameters, decision, usage),
and the request's one log record carries it all. Outside such a scope ``note`` does nothing, so
the SDK pays nothing for it. Texts noted under ``TEXT_FIELDS`` are dropped from the record unless
the ``log_text`` setting asks for them, and anything shaped like an API key is masked in every
record, whatever logged it.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

TEXT_FIELDS = frozenset({"question", "answer", "prompt"})
"""User text: logged only with ``RAGGUARD_LOG_TEXT=true``; otherwise its length is."""

_KEY = re.compile(r"\brg_[A-Za-z0-9_-]{8,}")
_BEARER = re.compile(r"(?i)\b(bearer)\s+[^\s\"',;]+")
_FIELDS: ContextVar[dict[str, Any] | None] = ContextVar("ragguard_log_fields", default=None)


def note(**fields: Any) -> None:
    """Add ``fields`` to the current request's log record (no-op outside a request)."""
    collected = _FIELDS.get()
    if collected is not None:
        collected.update(fields)


@contextmanager
def collecting() -> Iterator[dict[str, Any]]:
    """A scope whose ``note`` calls, from this task and tasks it starts, land in one dict."""
    fields: dict[str, Any] = {}
    token = _FIELDS.set(fields)
    try:
        yield fields
    finally:
        _FIELDS.reset(token)


def redacted(fields: dict[str, Any], *, keep_text: bool) -> dict[str, Any]:
    """``fields`` with user text replaced by its length unless ``keep_text``."""
    if keep_text:
        return dict(fields)
    out: dict[str, Any] = {}
    for name, value in fields.items():
        if name in TEXT_FIELDS:
            out[f"{name}_chars"] = len(value) if isinstance(value, str) else None
        else:
            out[name] = value
    return out


def mask_secrets(text: str) -> str:
    """API keys (``rg_...``) and bearer tokens in ``text`` replaced by a marker."""
    return _BEARER.sub(r"\1 [redacted]", _KEY.sub("rg_[redacted]", text))


class JsonFormatter(logging.Formatter):
    """A record as one line of JSON: time, level, logger, message, and its ``fields`` extra."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            data.update(fields)
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return mask_secrets(json.dumps(data, default=str, ensure_ascii=False))


class TextFormatter(logging.Formatter):
    """The classic one-line format, with the record's ``fields`` appended and secrets masked."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict) and fields:
            line += " " + json.dumps(fields, default=str, ensure_ascii=False)
        return mask_secrets(line)


def configure(level: str, fmt: str) -> None:
    """Send every logger's records (uvicorn's included) to stderr in ``fmt``: json or text."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        uvicorn_logger = logging.getLogger(name)
        uvicorn_logger.handlers.clear()
        uvicorn_logger.propagate = True
