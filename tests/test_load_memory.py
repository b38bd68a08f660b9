"""benchmarks/load_memory.py loads the default model in a child process and reports its time,
peak RSS and weight bytes (the real SmolLM2, a few seconds a load)."""

from __future__ import annotations

import sys

import pytest

from benchmarks import load_memory

pytestmark = pytest.mark.model


def test_a_load_in_a_child_process_reports_its_peak_and_weights(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["load_memory.py", "--models", "default", "--formats", "int8"])
    load_memory.main()
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("| model | format | code |")
    model, fmt, code, seconds, peak, weights = (
        cell.strip() for cell in lines[2].strip("|").split("|")
    )
    assert (model, fmt, code) == ("default", "int8", "this checkout")
    assert float(seconds.removesuffix(" s")) > 0
    # SmolLM2-135M in int8 holds 129 MiB of weights; the process that loaded it held more
    assert weights == "129 MiB"
    assert float(peak.removesuffix(" GiB")) * 1024 > 129
