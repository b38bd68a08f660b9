"""The reviewer's page shows each collection's risk control, in a real browser (headless
Chromium, as ``test_review_page``): before any label the target risk is not calibrated and every
answer waits for a person; a verdict given on the page shows up as a uniform label."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.rag.test_review_page import _browser_page, sign_in, sync_api

if TYPE_CHECKING:
    from starlette.types import ASGIApp

pytestmark = pytest.mark.browser


def test_the_risk_panel_shows_labels_and_the_threshold_state(
    tmp_path: Path, fake_demo_index_template: Path, live_server: Callable[[ASGIApp], str]
) -> None:
    from guards import Policy
    from rag.pipeline import Pipeline
    from rag.server import create_app
    from rag.settings import Settings
    from tests.fakes import HashingEmbedder, ScriptedGenerator

    shutil.copytree(fake_demo_index_template, tmp_path / "indexes" / "demo")
    settings = Settings(
        index_dir=tmp_path / "indexes", data_dir=tmp_path / "data", target_risk=0.1,
        calibrate_every=0, _env_file=None,
    )  # fmt: skip
    pipeline = Pipeline(settings, HashingEmbedder(), ScriptedGenerator())
    assert pipeline.checker is not None
    pipeline.checker.policy = Policy(abstain_below=0.0, review_below=0.0)
    url = str(live_server(create_app(pipeline=pipeline)))
    asked = httpx.post(url + "/v1/ask", json={"question": "What is continuous batching?"})
    result = asked.json()
    assert result["decision"] == "review"
    assert result["decision_reasons"][0].startswith("not_calibrated")

    expect = sync_api.expect
    with _browser_page() as page:
        sign_in(page, url, "ann")
        row = page.locator("#risk tbody tr")
        expect(row).to_contain_text("0 (0 uniform)")
        expect(row).to_contain_text("not calibrated")
        expect(page.locator("#items li")).to_have_count(1)
        page.locator("#items li").first.click()
        page.click("#claim")
        expect(page.locator("#item-meta")).to_contain_text("claimed by ann")
        page.click("#approve")
        expect(row).to_have_count(1)
        expect(row).to_contain_text("demo")
        expect(row).to_contain_text("1 (1 uniform)")
        expect(row).to_contain_text("not calibrated")
        expect(page.locator("#risk-note")).to_contain_text(
            "needs at least 29 (the first checkpoint"
        )
    pipeline.close()
