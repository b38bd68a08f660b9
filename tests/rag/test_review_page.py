"""The reviewer's page in a real browser: headless Chromium driven by Playwright, against the real
server (uvicorn on a free port) with the real pipeline.

Needs the ``playwright`` package (the ``dev`` extra) and a Chromium binary (Debian's
``chromium``; Playwright's own browser downloads are not used). Skips, saying which is missing,
where either is absent. ``RAGGUARD_UPDATE_SCREENSHOT=1`` refreshes docs/img/review-page.png.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from guards import Policy

if TYPE_CHECKING:
    from playwright.sync_api import Page
    from starlette.types import ASGIApp

    from guards.review import ReviewStore
    from rag.pipeline import Pipeline

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("RAGGUARD_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed: pip install -e '.[dev]'"
)
if not Path(CHROMIUM).is_file():
    pytest.skip(
        f"no Chromium at {CHROMIUM}: apt-get install chromium (or set RAGGUARD_CHROMIUM)",
        allow_module_level=True,
    )


@pytest.fixture
def server(demo_pipeline: Pipeline, live_server: Callable[[ASGIApp], str]) -> str:
    from rag.server import create_app

    assert demo_pipeline.checker is not None  # the guards are on by default
    demo_pipeline.checker.policy = Policy(abstain_below=0.0, review_below=1.0)  # all to review
    return str(live_server(create_app(pipeline=demo_pipeline)))


@contextmanager
def _browser_page() -> Iterator[Page]:
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.set_default_timeout(15_000)
        yield page
        browser.close()


@pytest.fixture
def page(server: str) -> Iterator[Page]:
    with _browser_page() as page:
        yield page


def test_a_reviewer_edits_and_approves_flagged_answers_in_the_browser(
    server: str, page: Page
) -> None:
    expect = sync_api.expect
    ask = httpx.Client(base_url=server, timeout=120)
    first = ask.post(
        "/v1/ask", json={"question": "What does a KV cache avoid recomputing?", "max_tokens": 16}
    ).json()
    second = ask.post(
        "/v1/ask", json={"question": "What is continuous batching?", "max_tokens": 16}
    ).json()
    assert first["decision"] == second["decision"] == "review"
    # The queue puts the less confident answer first: edit that one, approve the other.
    order = [i["id"] for i in ask.get("/v1/reviews").json()["items"]]
    first, second = sorted((first, second), key=lambda r: order.index(r["review_id"]))

    page.goto(server + "/review")
    page.fill("#reviewer", "ann")
    page.click("#who button[type=submit]")
    expect(page.locator("#items li")).to_have_count(2)
    expect(page.locator("#queue-count")).to_have_text("1–2 of 2")

    # The age filter: both items were just queued, so none is older than an hour.
    page.select_option("#f-age", "min_age_s:3600")
    expect(page.locator("#queue-count")).to_have_text("nothing here")
    page.select_option("#f-age", "max_age_s:3600")
    expect(page.locator("#items li")).to_have_count(2)
    page.select_option("#f-age", "")
    expect(page.locator("#queue-count")).to_have_text("1–2 of 2")

    # Open the first item by keyboard, claim it, edit the answer, rate it, save.
    page.locator("body").press("Enter")
    expect(page.locator("#item-question")).to_have_text(first["question"])
    expect(page.locator("#item-passages mark").first).to_be_visible()  # cited sentence marked
    expect(page.locator("#item-guards tbody tr").first).to_be_visible()
    page.keyboard.press("c")
    expect(page.locator("#item-meta")).to_contain_text("claimed by ann")
    page.keyboard.press("e")
    edited = "Reviewed: " + first["answer"]
    page.fill("#edit-box", edited)
    page.select_option("#r-relevance", "3")
    page.select_option("#r-usefulness", "4")
    page.fill("#r-comment", "the model's answer was cut off")
    if os.environ.get("RAGGUARD_UPDATE_SCREENSHOT"):
        page.screenshot(path=str(ROOT / "docs" / "img" / "review-page.png"), full_page=True)
    page.locator("#edit-box").press("Control+Enter")
    expect(page.locator("#toast")).to_have_text("edited answer saved")
    expect(page.locator("#item-answer")).to_have_text(edited)
    expect(page.locator("#audit")).to_contain_text("ann · edit → edited")
    expect(page.locator("#audit")).to_contain_text("ann · claim → claimed")

    # The second item: next in the queue (j), claim and approve with the keyboard.
    expect(page.locator("#items li")).to_have_count(1)  # the pending filter drops the edited one
    page.locator("body").press("Enter")
    expect(page.locator("#item-question")).to_have_text(second["question"])
    page.keyboard.press("c")
    expect(page.locator("#approve")).to_be_enabled()
    # Relevance 2, fluency 1 (f, 1), usefulness 4 (s, 4); 9 is off the relevance scale.
    for key in "2f1s49":
        page.keyboard.press(key)
    expect(page.locator("#r-relevance")).to_have_value("2")
    expect(page.locator("#r-fluency")).to_have_value("1")
    expect(page.locator("#r-usefulness")).to_have_value("4")
    page.keyboard.press("a")
    expect(page.locator("#toast")).to_have_text("approved")
    expect(page.locator("#audit")).to_contain_text("ann · approve → approved")
    expect(page.locator("#queue-count")).to_have_text("nothing here")
    stored = ask.get(f"/v1/reviews/{second['review_id']}").json()["ratings"]
    assert [(r["relevance"], r["fluency"], r["usefulness"]) for r in stored] == [(2, 1, 4)]

    # Without keys everyone is an admin: a resolved item can become a gold item.
    page.click("#make-gold")
    expect(page.locator("#toast")).to_contain_text("gold item")
    expect(page.locator("#audit")).to_contain_text("ann · made_gold")
    expect(page.locator("#make-gold")).to_be_hidden()  # once per item

    # Bad input shows the server's reason: resolving again is a 409.
    page.locator("#approve").evaluate("b => b.disabled = false")
    page.click("#approve")
    expect(page.locator("#toast")).to_contain_text("409")

    page.keyboard.press("?")
    expect(page.locator("#help")).to_be_visible()

    again = ask.post("/v1/ask", json={"question": first["question"].lower() + "  "}).json()
    assert again["answer"] == edited and again["review_id"] == first["review_id"]
    approved = ask.post("/v1/ask", json={"question": second["question"]}).json()
    assert approved["answer"] == second["answer"] and approved["decision"] == "answer"
    assert "approved by reviewer ann" in approved["decision_reasons"][0]


def test_a_second_reviewer_rates_resolved_items_from_the_page(
    server: str, page: Page, demo_pipeline: Pipeline
) -> None:
    expect = sync_api.expect
    demo_pipeline.reviews.store.min_ratings = 2
    ask = httpx.Client(base_url=server, timeout=120)
    flagged = ask.post(
        "/v1/ask", json={"question": "What is speculative decoding?", "max_tokens": 12}
    ).json()
    item = flagged["review_id"]
    ann = {"x-reviewer": "ann"}
    ask.post(f"/v1/reviews/{item}/claim", headers=ann)
    ask.post(f"/v1/reviews/{item}/resolve", headers=ann, json={"action": "approve"})

    page.goto(server + "/review")
    page.fill("#reviewer", "bob")
    page.click("#who button[type=submit]")
    expect(page.locator("#queue-count")).to_be_visible()
    page.locator("body").press("t")
    expect(page.locator("#item-question")).to_have_text(flagged["question"])
    expect(page.locator("#item-meta")).to_contain_text("approve by ann")
    expect(page.locator("#item-meta")).not_to_contain_text("claimed by")  # only while claimed
    expect(page.locator("#save-ratings")).to_be_visible()
    for key in "2f2s3":
        page.keyboard.press(key)
    page.keyboard.press("w")
    expect(page.locator("#toast")).to_have_text("ratings saved")
    expect(page.locator("#save-ratings")).to_be_hidden()  # rated once
    expect(page.locator("#audit")).to_contain_text("bob · rate")
    page.locator("body").press("t")
    expect(page.locator("#toast")).to_have_text("nothing needs your ratings")
    stored = ask.get(f"/v1/reviews/{item}").json()["ratings"]
    assert [(r["reviewer"], r["relevance"], r["fluency"], r["usefulness"]) for r in stored] == [
        ("bob", 2, 2, 3)
    ]


@pytest.fixture
def queue_server(
    tmp_path: Path, live_server: Callable[[ASGIApp], str]
) -> Iterator[tuple[str, ReviewStore]]:
    """The server without a model (it fails to load; the queue does not need it), and its store."""
    from rag.server import create_app
    from rag.settings import Settings

    settings = Settings(
        index_dir=tmp_path / "indexes",
        data_dir=tmp_path / "data",
        model=str(tmp_path / "missing.gguf"),
        _env_file=None,
    )
    app = create_app(settings)
    url = str(live_server(app))
    yield url, app.state.ragguard.reviews


def sign_in(page: Page, url: str, name: str) -> None:
    page.goto(url + "/review")
    page.fill("#reviewer", name)
    page.click("#who button[type=submit]")
    sync_api.expect(page.locator("#queue-count")).not_to_have_text("")


def test_text_that_would_reorder_or_control_the_page_is_shown_marked(
    queue_server: tuple[str, ReviewStore],
) -> None:
    from guards.review import NewItem

    expect = sync_api.expect
    url, store = queue_server
    title = "Invoice \u202egnp.exe for \u2066you\u2069"
    store.add(
        NewItem(
            title,
            "Answer\x1b[2J\x1b]0;owned\x07 hidden\u200f.",
            passages=[{"doc_id": "d", "text": "Invoice \u202egnp.exe is a file."}],
            reasons=["reason \u202eright"],
        )
    )
    with _browser_page() as page:
        sign_in(page, url, "ann")
        expect(page.locator("#items li .q")).to_have_text(
            "Invoice <U+202E>gnp.exe for <U+2066>you<U+2069>"
        )
        page.locator("body").press("Enter")
        expect(page.locator("#item-question")).to_have_text(
            "Invoice <U+202E>gnp.exe for <U+2066>you<U+2069>"
        )
        expect(page.locator("#item-answer")).to_have_text(
            "Answer\u241b[2J\u241b]0;owned\u2407 hidden<U+200F>."
        )
        expect(page.locator("#item-reasons")).to_have_text("reason <U+202E>right")
        expect(page.locator("#item-passages")).to_contain_text("Invoice <U+202E>gnp.exe")
        shown = page.locator("#item").inner_text()
        assert not set(shown) & set("\u202e\u2066\u2069\u200f\x1b\x07")
    # The API still returns the text exactly as stored.
    listed = httpx.get(url + "/v1/reviews", headers={"x-reviewer": "ann"}).json()
    assert listed["items"][0]["question"] == title


def test_an_escalated_item_shows_to_whom_and_is_not_the_escalators(
    queue_server: tuple[str, ReviewStore],
) -> None:
    from guards.review import NewItem, Resolution

    expect = sync_api.expect
    url, store = queue_server
    item = store.add(NewItem("Too hard for ann?", "Maybe.")).id
    store.claim(item, "ann")
    store.resolve(item, "ann", Resolution.ESCALATE)
    with _browser_page() as page:
        sign_in(page, url, "ann")
        page.select_option("#f-status", "escalated")
        expect(page.locator("#items li")).to_have_count(1)
        expect(page.locator("#items li")).to_contain_text("→ admins")
        page.locator("body").press("Enter")
        expect(page.locator("#item-meta")).to_contain_text("escalated by ann to admins")
        expect(page.locator("#claim")).to_be_disabled()  # not back to who escalated it

        sign_in(page, url, "bob")  # without keys everyone is an admin: bob may take it
        page.select_option("#f-status", "escalated")
        expect(page.locator("#items li")).to_have_count(1)
        page.locator("body").press("Enter")
        expect(page.locator("#item-question")).to_have_text("Too hard for ann?")
        expect(page.locator("#claim")).to_be_enabled()
        page.keyboard.press("c")
        expect(page.locator("#item-meta")).to_contain_text("claimed by bob")
        expect(page.locator("#item-meta")).to_contain_text("escalated by ann to admins")
        page.fill("#escalate-to", "carol")
        page.click("#escalate")
        expect(page.locator("#toast")).to_have_text("escalated to carol")
        expect(page.locator("#item-meta")).to_contain_text("escalated by bob to carol")
        expect(page.locator("#item-meta")).not_to_contain_text("claimed by")
        expect(page.locator("#claim")).to_be_disabled()
    assert store.get(item).escalated_to == "carol"
