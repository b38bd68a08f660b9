"""``ragguard ask --stream --server URL``: each token event the server streams is written as it
arrives (no line end), then what the guards decided; in process, against a live server over the
fake models (whose generator delivers its answer as one event: the SSE order itself is tested
token by token with the real model in test_serving.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from rag.cli import commands, main
from rag.server import create_app

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from rag.pipeline import Pipeline

QUESTION = "What does a KV cache store?"


def test_ask_stream_prints_tokens_as_they_come_then_the_decision(
    fake_pipeline: Pipeline,
    live_server: Callable[[ASGIApp], str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = live_server(create_app(pipeline=fake_pipeline))
    assert main(["ask", QUESTION, "--server", url]) == 0
    whole = capsys.readouterr().out

    writes: list[tuple[str, str]] = []
    monkeypatch.setattr(
        commands, "out", lambda text="", **kw: writes.append((text, kw.get("end", "\n")))
    )
    assert main(["ask", QUESTION, "--server", url, "--stream"]) == 0
    pieces = [text for text, end in writes if end == ""]
    assert pieces and writes[: len(pieces)] == [(p, "") for p in pieces]  # the tokens come first
    streamed = "".join(pieces)
    assert streamed.strip() and streamed.strip() in whole  # the same answer as without --stream
    rest = "\n".join(text for text, end in writes[len(pieces) :])
    assert "decision:" in rest and "decision:" in whole
    assert streamed.strip() not in rest  # the answer is not printed a second time


def test_stream_and_json_do_not_go_together(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ask", QUESTION, "--server", "http://127.0.0.1:9", "--stream", "--json"]) == 2
    assert "--stream and --json" in capsys.readouterr().err
