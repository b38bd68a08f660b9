"""``ragguard review`` and ``ragguard keys``: on the data directory and against a live server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from guards import Policy
from guards.review import NewItem, ReviewStore
from rag.cli import main

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
def server(demo_pipeline, live_server) -> str:  # type: ignore[no-untyped-def]
    from rag.server import create_app

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
