"""The ragguard command line, run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def ragguard(
    *args: str, cwd: Path, input_text: str | None = None
) -> subprocess.CompletedProcess[str]:
    # float32: the answers checked here (a citation, the figure) are float32 SmolLM2's; the int8
    # CPU default words this answer without a citation marker.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    env["RAGGUARD_QUANTIZATION"] = "none"
    return subprocess.run(
        [sys.executable, "-m", "rag.cli", *args],
        cwd=cwd,
        env=env,
        input=input_text,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_help_does_not_import_heavy_libraries() -> None:
    code = "import sys, rag.cli.commands; rag.cli.commands.build_parser(); print(sorted(m for m in ('torch', 'transformers', 'faiss', 'sentence_transformers', 'llama_index') if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
    help_text = ragguard("--help", cwd=ROOT)
    assert help_text.returncode == 0
    for command in ("ingest", "ask", "serve", "index", "eval"):
        assert command in help_text.stdout


@pytest.mark.model
@pytest.mark.slow  # 34 s of CLI runs, each loading the models: the default tier stays well under 10 min
def test_ingest_info_ask_and_delete(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "tower.md").write_text(
        "# Tower\n\nThe Eiffel Tower is 330 metres tall and stands in Paris."
    )
    (docs / "river.txt").write_text("The Danube flows through ten countries before the Black Sea.")

    ingest = ragguard("ingest", str(docs), "--index", "notes", cwd=tmp_path)
    assert ingest.returncode == 0, ingest.stderr
    assert "2 added" in ingest.stdout and "2 documents" in ingest.stdout
    again = ragguard("ingest", str(docs), "--index", "notes", "--quiet", cwd=tmp_path)
    assert "2 unchanged" in again.stdout

    info = json.loads(ragguard("index", "info", "notes", cwd=tmp_path).stdout)
    assert info["num_documents"] == 2 and info["embedding_model"].startswith("all-MiniLM-L6-v2@")
    assert ragguard("index", "list", cwd=tmp_path).stdout.split() == ["notes"]

    ask = ragguard(
        "ask",
        "How tall is the Eiffel Tower?",
        "--index",
        "notes",
        "--max-tokens",
        "32",
        "--json",
        cwd=tmp_path,
    )
    assert ask.returncode == 0, ask.stderr
    result = json.loads(ask.stdout)
    assert result["citations"][0]["doc_id"] == "tower.md"
    assert "330" in result["answer"]
    assert result["decision"] in ("answer", "review") and 0 <= result["confidence"] <= 1

    refused = ragguard("index", "delete", "notes", cwd=tmp_path, input_text="n\n")
    assert refused.returncode == 1 and (tmp_path / "indexes" / "notes").exists()
    deleted = ragguard("index", "delete", "notes", "--yes", cwd=tmp_path)
    assert deleted.returncode == 0 and not (tmp_path / "indexes" / "notes").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("ask", "anything", "--index", "missing"), "does not exist"),
        (("ingest", "nowhere"), "does not exist"),
        (("index", "info", "missing"), "no index"),
        (("index", "info", "../up"), "invalid index name"),
    ],
)
def test_errors_are_one_line_messages_not_tracebacks(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    result = ragguard(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
