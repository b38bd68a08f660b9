"""``ragguard review`` and ``ragguard keys``: on the data directory and against a live server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from guards import Policy
from guards.review import NewItem, ReviewStore
from rag.cli import main

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from rag.pipeline import Pipeline

ROOT = Path(__file__).resolve().parents[2]


def ragguard(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rag.cli", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), "USER": "ann"},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow  # CLI subprocesses, 30-50 s each: the default tier stays under 10 minutes
def test_review_commands_on_the_data_directory(tmp_path: Path) -> None:
    store = ReviewStore(tmp_path / "data" / "reviews.sqlite")
    ids = [
        store.add(
            NewItem(
                f"Question {n}?",
                f"Answer {n} [1].",
                passages=[{"doc_id": "d", "text": f"Answer {n} is right."}],
                confidence=0.1 * n,
                index_name="demo",
            )
        ).id
        for n in (1, 2)
    ]
    store.close()
    listed = ragguard("review", "list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].startswith(ids[0]) and "(2 of 2)" in listed.stderr

    shown = ragguard("review", "show", ids[0], cwd=tmp_path)
    assert "question: Question 1?" in shown.stdout and "cited: Answer 1 is right." in shown.stdout

    refused = ragguard("review", "approve", ids[0], cwd=tmp_path)
    assert refused.returncode == 2 and "claim it first" in refused.stderr

    claimed = ragguard("review", "claim", cwd=tmp_path)  # the most urgent: lowest confidence
    assert claimed.returncode == 0 and f"{ids[0]}  [claimed] claimed by ann" in claimed.stdout
    edited = ragguard(
        "review",
        "edit",
        ids[0],
        "--relevance",
        "2",
        "--comment",
        "ok",
        cwd=tmp_path,
        stdin="Answer one [1].\n",
    )
    assert edited.returncode == 0, edited.stderr
    assert "edited:   Answer one [1]." in edited.stdout and "ann: edit" in edited.stdout
    bad = ragguard("review", "reject", ids[1], "--relevance", "7", cwd=tmp_path)
    assert bad.returncode == 2 and "relevance must be an integer from 0 to 3" in bad.stderr
    missing = ragguard("review", "show", "nope", cwd=tmp_path)
    assert missing.returncode == 2 and "no review item has id 'nope'" in missing.stderr

    exported = ragguard("review", "export", "--format", "csv", cwd=tmp_path)
    assert exported.returncode == 0 and exported.stdout.startswith("id,status,question")
    lines = ragguard("review", "export", "--status", "edited", cwd=tmp_path).stdout.splitlines()
    assert [json.loads(line)["id"] for line in lines] == [ids[0]]
    nowhere = ragguard("review", "export", "-o", "no/such/dir/x.jsonl", cwd=tmp_path)
    assert nowhere.returncode == 2 and "Traceback" not in nowhere.stderr
    assert "no/such/dir/x.jsonl" in nowhere.stderr


@pytest.mark.slow  # CLI subprocesses, 30-50 s each: the default tier stays under 10 minutes
def test_keys_commands(tmp_path: Path) -> None:
    created = ragguard("keys", "create", "ann", "--role", "reviewer", cwd=tmp_path)
    assert created.returncode == 0 and created.stdout.startswith("rg_")
    assert ragguard("keys", "list", cwd=tmp_path).stdout.split() == ["ann", "reviewer"]
    assert ragguard("keys", "create", "ann", cwd=tmp_path).returncode == 2
    assert ragguard("keys", "revoke", "ann", cwd=tmp_path).returncode == 0
    assert ragguard("keys", "list", cwd=tmp_path).stdout == ""


def test_serve_refuses_to_listen_beyond_loopback_without_keys(tmp_path: Path) -> None:
    refused = ragguard("serve", "--host", "0.0.0.0", cwd=tmp_path)
    assert refused.returncode == 2
    assert "refusing to listen on 0.0.0.0 without API keys" in refused.stderr


@pytest.fixture
def server(demo_pipeline: Pipeline, live_server: Callable[[ASGIApp], str]) -> str:
    from rag.server import create_app

    assert demo_pipeline.checker is not None  # the guards are on by default
    demo_pipeline.checker.policy = Policy(abstain_below=0.0, review_below=1.0)
    return str(live_server(create_app(pipeline=demo_pipeline)))


def test_a_flagged_answer_is_handled_from_the_cli_against_the_server(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from rag.client import Client

    with Client(server) as client:
        flagged = client.ask("What does a KV cache avoid recomputing?", max_tokens=8)
    assert flagged.review_id
    common = ["--server", server, "--reviewer", "bob"]
    assert main(["review", "list", *common]) == 0
    assert capsys.readouterr().out.startswith(flagged.review_id)
    assert main(["review", "claim", flagged.review_id, *common]) == 0
    assert "claimed by bob" in capsys.readouterr().out
    assert main(["review", "approve", flagged.review_id, "--usefulness", "9", *common]) == 2
    assert "less than or equal to 4" in capsys.readouterr().err
    assert (
        main(["review", "approve", flagged.review_id, "--usefulness", "3", "--json", *common]) == 0
    )
    done = json.loads(capsys.readouterr().out)
    assert done["status"] == "approved" and [a["action"] for a in done["audit"]][-1] == "approve"
    assert main(["review", "approve", flagged.review_id, *common]) == 2
    assert "already approved by bob" in capsys.readouterr().err
    with Client(server) as client:
        again = client.ask("What does a KV cache avoid recomputing?")
    assert again.answer == flagged.answer and again.review_id == flagged.review_id
    assert again.decision_reasons == [f"approved by reviewer bob (review {flagged.review_id})"]


def _store_with(tmp_path: Path, *items: NewItem) -> list[str]:
    store = ReviewStore(tmp_path / "data" / "reviews.sqlite", gold_rate=0)
    ids = [store.add(item).id for item in items]
    store.close()
    return ids


def test_options_go_before_or_after_the_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = _store_with(tmp_path, NewItem("One?", "a"), NewItem("Two?", "b"))
    data = ["--data-dir", str(tmp_path / "data")]
    assert main(["review", "claim", "--reviewer", "bob", *data, first]) == 0
    assert f"{first}  [claimed] claimed by bob" in capsys.readouterr().out
    assert main(["review", "--reviewer", "bob", "reject", first, "--relevance", "1", *data]) == 0
    assert "[rejected] reject by bob" in capsys.readouterr().out
    assert main(["review", "show", *data, second, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == second
    assert main(["keys", "create", "--role", "admin", *data, "ops"]) == 0
    assert capsys.readouterr().out.startswith("rg_")


def test_show_says_who_resolved_an_item_not_who_claimed_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (item_id,) = _store_with(tmp_path, NewItem("Done?", "a"))
    common = ["--data-dir", str(tmp_path / "data"), "--reviewer", "root"]
    main(["review", "claim", item_id, *common])
    main(["review", "approve", item_id, *common])
    capsys.readouterr()
    assert main(["review", "show", item_id, *common]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header.startswith(f"{item_id}  [approved] approve by root at ")
    assert "claimed by" not in header
    main(["review", "list", "--status", "approved", *common])
    assert "(approve by root at " in capsys.readouterr().out


def test_an_escalation_goes_to_someone_else_from_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (item_id,) = _store_with(tmp_path, NewItem("Hard one?", "a"))
    data = ["--data-dir", str(tmp_path / "data")]
    main(["review", "claim", item_id, "--reviewer", "ann", *data])
    assert main(["review", "approve", item_id, "--to", "bob", "--reviewer", "ann", *data]) == 2
    assert "--to goes with `ragguard review escalate` only" in capsys.readouterr().err
    assert main(["review", "escalate", "--to", "bob", item_id, "--reviewer", "ann", *data]) == 0
    assert f"{item_id}  [escalated] escalated by ann to bob" in capsys.readouterr().out
    assert main(["review", "claim", item_id, "--reviewer", "ann", *data]) == 2
    assert "you (ann) escalated item" in capsys.readouterr().err
    assert main(["review", "claim", "--reviewer", "ann", *data]) == 1  # nothing else for ann
    assert "the queue is empty" in capsys.readouterr().out
    assert main(["review", "list", "--status", "escalated", *data]) == 0
    assert "(escalated by ann to bob)" in capsys.readouterr().out
    assert main(["review", "claim", item_id, "--reviewer", "bob", *data]) == 0
    assert "[claimed] claimed by bob; escalated by ann to bob" in capsys.readouterr().out


ATTACK = "\x1b[2J\x1b[H\x1b]0;owned\x07\x1b[8mhidden\x1b[0m \x9b31m"
"""Clear the screen, home the cursor, set the window title, conceal text, a C1 CSI."""


def test_review_commands_show_terminal_controls_instead_of_obeying_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (item_id,) = _store_with(
        tmp_path,
        NewItem(
            f"Title {ATTACK}?",
            "Answer \u202egnp.exe\u202c [1].",
            passages=[{"doc_id": f"doc{ATTACK}", "text": f"Passage {ATTACK}."}],
            reasons=[f"reason {ATTACK}"],
            guard_results=[{"name": "g", "outcome": "fail", "reason": ATTACK}],
        ),
    )
    common = ["--data-dir", str(tmp_path / "data"), "--reviewer", "ann"]
    for command in (["show", item_id], ["list"], ["claim", item_id]):
        assert main(["review", *command, *common]) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out and "\x9b" not in out and "\x07" not in out
        assert "\u241b[2J\u241b[H\u241b]0;owned\u2407" in out  # shown, not obeyed
    assert main(["review", "show", item_id, *common]) == 0
    shown = capsys.readouterr().out
    assert "answer:   Answer <U+202E>gnp.exe<U+202C> [1]." in shown and "\u202e" not in shown
    assert main(["review", "show", item_id, "--json", *common]) == 0
    assert json.loads(capsys.readouterr().out)["question"] == f"Title {ATTACK}?"  # exact
    # An export is exact in a file or a pipe, and shown safely on a terminal.
    assert main(["review", "export", *common]) == 0
    assert json.loads(capsys.readouterr().out)["answer"] == "Answer \u202egnp.exe\u202c [1]."
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert main(["review", "export", "--format", "csv", *common]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out and "<U+202E>gnp.exe" in out


def test_ask_output_shows_terminal_controls_instead_of_obeying_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from rag.cli.commands import _print_result, _print_stream
    from rag.types import Citation, Result, ResultEvent, TokenEvent, Usage

    result = Result(
        question="q",
        answer=f"An answer {ATTACK} \u202eright-to-left",
        citations=[Citation(1, f"doc{ATTACK}", "c", f"cited {ATTACK}", 0.5)],
        passages=[],
        abstained=False,
        abstain_reason=None,
        timings={"total_s": 0.1},
        usage=Usage(1, 1),
        model="m",
        index="demo",
        request_id="r",
        confidence=0.4,
        decision_reasons=[f"reason {ATTACK}"],
    )
    _print_result(result, False)
    _print_stream(iter([TokenEvent("\x1b[2"), TokenEvent("J streamed"), ResultEvent(result)]))
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x9b" not in out and "\u202e" not in out
    assert "An answer \u241b[2J" in out and "<U+202E>right-to-left" in out
    assert "\u241b[2J streamed" in out and "reason \u241b[2J" in out and "cited \u241b" in out


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path: Path) -> None:
    """``ragguard review show ID | head -1``: the pipe closes while the answer is printed."""
    (item_id,) = _store_with(tmp_path, NewItem("Long?", "word " * 400_000))
    reader = subprocess.Popen(
        [sys.executable, "-m", "rag.cli", "review", "show", item_id],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "USER": "ann"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert reader.stdout is not None and reader.stderr is not None
    assert reader.stdout.readline().startswith(item_id.encode())
    reader.stdout.close()  # as `head -1` does after its line
    code = reader.wait(timeout=120)
    errors = reader.stderr.read().decode()
    reader.stderr.close()
    assert code == 141, errors
    assert errors == ""
